"""What the GPU did during the timed steps, from NVML: energy, power, clocks, temperature, throttling.

NVML is read at the two ends of the timed region and never in between, so no sampling thread
competes with the training loop for the interpreter. Energy is the delta of the device's
total-energy counter (Volta and later); average power is that energy over the elapsed time.
Throttling is the clock-event reasons NVML reports at either end, plus any growth between them in
its cumulative power- and thermal-violation counters, which catches a slowdown that came and went
in the middle. The device is found by UUID: under CUDA_VISIBLE_DEVICES, torch's index and NVML's
differ (amp_suite.instruments.nvml). On a CPU every field is null; on a GPU a reading NVML does not support
is null and the rest stand, and `gpu_state_note` says what was missing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from amp_suite.instruments import LiveDevice, TimedRegion
from amp_suite.instruments.nvml import NVML_CLOCK_SM, NVML_TEMPERATURE_GPU, SLOWDOWNS, NvmlDevice, decode_reasons
from amp_suite.records.results import CellRecord
from amp_suite.records.schema import fields_of

# NVML's cumulative violation counters (nvmlDeviceGetViolationStatus policies): time spent held
# below the requested clocks by the power cap and by temperature.
VIOLATION_POLICIES = {"power_cap_violation": 0, "thermal_violation": 1}
# The energy counter advances in steps of tens of milliseconds or more (by GPU generation): over a
# shorter timed region its delta says more about the counter than about the steps.
MIN_ENERGY_WINDOW_S = 1.0
# A pause shorter than this (an evaluation of a small validation set) is too short for the counter:
# the readings at its ends would each miss up to one update, the one before it holding the steps'
# energy, so subtracting them takes out about half an update of the steps' energy a pause, or a whole
# one. Its energy is counted instead at the steps' rate, over its time (`fields`): off by its time x
# the difference in power, a few milliseconds' worth. Longer pauses (another cell's turn side by
# side, whose energy is that cell's) are subtracted, reading for reading.
SHORT_PAUSE_S = 0.1

FIELDS = fields_of(CellRecord, instrument="gpu_state")  # the record fields this instrument fills


@dataclass
class Reading:
    at: float  # perf_counter seconds
    energy_mj: int | None = None
    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    reasons: int | None = None  # bitmask of clock-event reasons
    violations_ns: dict[str, int] = field(default_factory=dict)


class GpuState:
    """Context manager around the timed steps; `fields(region)` gives the record's fields."""

    def __init__(self, device: LiveDevice, nvml: ModuleType | None = None) -> None:
        self.device = device
        self._nvml = nvml  # tests pass a stand-in; None: pynvml, imported on a GPU only
        self._gpu: NvmlDevice | None = None
        self._note: str | None = None
        self.start: Reading | None = None
        self.end: Reading | None = None
        self._excluded_s = 0.0  # paused() stretches: their time is not the steps'
        self._excluded_mj: int | None = 0  # the energy of the long ones (SHORT_PAUSE_S)
        self._short_pauses_s = 0.0  # the short ones: inside the energy's span, prorated out

    def __enter__(self) -> GpuState:
        self._open()
        if self._gpu is not None:
            self.start = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._gpu is None:
            return
        self.end = self._read()
        self._gpu.close()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the block's time and energy out (an evaluation between timed steps, another cell's
        turn): NVML is read at its two ends, outside the steps. A short block's energy is prorated
        out instead (SHORT_PAUSE_S)."""
        if self._gpu is None:
            yield
            return
        before = self._read()
        try:
            yield
        finally:
            after = self._read()
            self._excluded_s += after.at - before.at
            if after.at - before.at < SHORT_PAUSE_S:
                self._short_pauses_s += after.at - before.at
            elif self._excluded_mj is not None and before.energy_mj is not None and after.energy_mj is not None:
                self._excluded_mj += after.energy_mj - before.energy_mj
            else:
                self._excluded_mj = None  # a pause whose energy is unknown leaves the steps' unknown

    def fields(self, region: TimedRegion) -> dict[str, Any]:
        values: dict[str, Any] = dict.fromkeys(FIELDS)
        start, end = self.start, self.end
        if self._gpu is None or start is None or end is None:  # a CPU (all null), or NVML could not be opened
            return values | {"gpu_state_note": self._note}
        missing = self._gpu.missing
        notes = [f"NVML did not report: {', '.join(sorted(set(missing)))}"] if missing else []
        elapsed = end.at - start.at - self._excluded_s
        if start.energy_mj is not None and end.energy_mj is not None and self._excluded_mj is not None:
            if elapsed >= MIN_ENERGY_WINDOW_S:
                # Over the steps and the short pauses, the counter's delta less the long pauses'; the
                # steps' share of it by their time.
                spanned_j = (end.energy_mj - start.energy_mj - self._excluded_mj) / 1000
                energy_j = spanned_j * elapsed / (elapsed + self._short_pauses_s)
                per_sample, power = energy_j / region.samples, energy_j / elapsed
                values |= {"energy_j": energy_j, "energy_j_per_sample": per_sample, "power_w": power}
            else:
                notes.append(f"timed steps took {elapsed:.2f} s: too short for NVML's energy counter (>= 1 s)")
        either_end = (start.reasons or 0) | (end.reasons or 0)
        seen = [name for name in decode_reasons(either_end) if name in SLOWDOWNS]
        # A violation counter that grew: held back at some point between the two readings.
        seen += [name for name, ns in end.violations_ns.items() if ns > start.violations_ns.get(name, ns)]
        known = start.reasons is not None or bool(start.violations_ns)
        return values | {
            "sm_clock_mhz_start": start.sm_clock_mhz,
            "sm_clock_mhz_end": end.sm_clock_mhz,
            "temperature_c_start": start.temperature_c,
            "temperature_c_end": end.temperature_c,
            "throttle_reasons": seen if known else None,
            "throttled": bool(seen) if known else None,
            "gpu_state_note": "; ".join(notes) or None,
        }

    def _open(self) -> None:
        try:  # None on a device NVML has nothing to say of (a CPU)
            self._gpu = self.device.gpu_reader(self._nvml)
        except Exception as exc:  # no driver library, a MIG slice NVML can't see, ...
            self._note = f"NVML unavailable: {type(exc).__name__}: {exc}"[:300]

    def _read(self) -> Reading:
        gpu = self._gpu
        assert gpu is not None  # opened by __enter__
        reading = Reading(at=time.perf_counter())
        reading.energy_mj = gpu.query("energy", "nvmlDeviceGetTotalEnergyConsumption")
        reading.sm_clock_mhz = gpu.query("sm clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM)
        reading.temperature_c = gpu.query("temperature", "nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)
        reading.reasons = gpu.clock_event_reasons()
        for name, policy in VIOLATION_POLICIES.items():
            status = gpu.query(name.replace("_", " "), "nvmlDeviceGetViolationStatus", policy)
            if status is not None:
                reading.violations_ns[name] = int(status.violationTime)
        return reading


INSTRUMENT = GpuState  # entered around the timed steps (amp_suite.instruments.instrumented)
