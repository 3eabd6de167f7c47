"""NVML readings around the timed steps, against a stand-in NVML (no GPU here; gpu-check.sh runs
the real one)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from amp_suite.hardware.backends import backend_of
from amp_suite.hardware.backends.cuda import CudaBackend
from amp_suite.instruments import TimedRegion, gpu_state, nvml
from amp_suite.instruments.gpu_state import FIELDS, GpuState

CUDA = CudaBackend(torch.device("cuda", 0))
SW_THERMAL, GPU_IDLE = 0x20, 0x1


class FakeNvml:
    """What NVML would say; the test changes `state` between the start and the end reading."""

    def __init__(self, **state) -> None:
        self.state = {"energy_mj": 1_000, "sm_clock": 1980, "temp": 40, "reasons": 0, "power_ns": 0, "thermal_ns": 0}
        self.state.update(state)
        self.unsupported: set[str] = set()
        self.asked_for: str | None = None
        self.init_error: Exception | None = None

    def _get(self, key):
        if key in self.unsupported:
            raise RuntimeError("NVMLError_NotSupported")
        return self.state[key]

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.asked_for = uuid
        return "handle"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._get("energy_mj")

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == 1  # NVML_CLOCK_SM
        return self._get("sm_clock")

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._get("temp")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._get("reasons")

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        return SimpleNamespace(violationTime=self._get({0: "power_ns", 1: "thermal_ns"}[policy]))


@pytest.fixture
def clock(monkeypatch):
    """perf_counter under the test's control, so the timed region lasts what the test says."""
    now = [100.0]
    monkeypatch.setattr(gpu_state.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(nvml, "_torch_uuid", lambda device: "GPU-1234")
    return now


def timed(nvml: FakeNvml, clock: list[float], seconds: float, **end_state) -> dict:
    with GpuState(CUDA, nvml) as state:
        clock[0] += seconds
        nvml.state.update(end_state)
    return state.fields(TimedRegion(steps=100, batch_size=10))


def test_energy_power_clocks_and_temperature_over_the_timed_steps(clock):
    nvml = FakeNvml()
    fields = timed(nvml, clock, 2.0, energy_mj=601_000, sm_clock=1755, temp=67)
    assert nvml.asked_for == "GPU-1234"  # by UUID: torch's index is not NVML's under CUDA_VISIBLE_DEVICES
    assert fields["energy_j"] == pytest.approx(600.0) and fields["energy_j_per_sample"] == pytest.approx(0.6)
    assert fields["power_w"] == pytest.approx(300.0)
    assert (fields["sm_clock_mhz_start"], fields["sm_clock_mhz_end"]) == (1980, 1755)
    assert (fields["temperature_c_start"], fields["temperature_c_end"]) == (40, 67)
    assert fields["throttled"] is False and fields["throttle_reasons"] == [] and fields["gpu_state_note"] is None


def test_a_paused_stretch_leaves_its_time_and_energy_out(clock):
    nvml = FakeNvml()
    with GpuState(CUDA, nvml) as state:
        clock[0] += 1.0
        nvml.state.update(energy_mj=301_000)
        with state.paused():  # an evaluation between timed steps: 1 s and 500 J that are not training's
            clock[0] += 1.0
            nvml.state.update(energy_mj=801_000)
        clock[0] += 1.0
        nvml.state.update(energy_mj=1_101_000)
    fields = state.fields(TimedRegion(steps=100, batch_size=10))
    assert fields["energy_j"] == pytest.approx(600.0) and fields["power_w"] == pytest.approx(300.0)


class TickingNvml(FakeNvml):
    """An energy counter as NVML keeps one: it advances every `tick_s` (10 ms), to the energy used
    up to that update. `run(seconds, watts)` moves the clock on at that power."""

    def __init__(self, clock: list[float], tick_s: float = 0.01) -> None:
        super().__init__()
        self.clock, self.tick_s = clock, tick_s
        self.points = [(clock[0], 0.0)]  # (time, joules used since the start): power changes here

    def run(self, seconds: float, watts: float) -> None:
        self.clock[0] += seconds
        self.points.append((self.clock[0], self.points[-1][1] + seconds * watts))

    def used_j(self, at: float) -> float:
        for (t0, e0), (t1, e1) in zip(self.points, self.points[1:], strict=False):
            if t0 <= at <= t1 and t1 > t0:
                return e0 + (e1 - e0) * (at - t0) / (t1 - t0)
        return self.points[-1][1]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        last_update = self.tick_s * int(self.clock[0] / self.tick_s + 1e-9)
        return round(1000 * self.used_j(last_update))


def test_where_the_counter_updates_fall_in_short_pauses_does_not_move_the_steps_energy(clock):
    """20 evaluations of 5 ms at 250 W between 2.1 s of steps at 300 W (630 J), on a counter that
    updates every 10 ms, timed from 5 phases against its updates. Subtracted reading for reading, a
    pause took out nothing or up to a whole update of the steps' energy, by where the updates fell:
    the estimates ranged over 597-655 J. Prorated, each is 625.2-625.4 J: off by the pauses' time x
    the difference in power (0.1 s x 50 W = 5 J), whatever the phase."""
    estimates = []
    for phase_ms in range(0, 10, 2):
        clock[0] = 100.0
        nvml = TickingNvml(clock)
        nvml.run(phase_ms / 1000, 300.0)  # the last warmup steps, up to where the timed ones start
        with GpuState(CUDA, nvml) as state:
            for _ in range(20):
                nvml.run(0.1, 300.0)
                with state.paused():
                    nvml.run(0.005, 250.0)
                nvml.run(0.005, 300.0)
        estimates.append(state.fields(TimedRegion(steps=100, batch_size=10))["energy_j"])
    assert max(estimates) - min(estimates) < 1.0, estimates
    assert all(abs(estimate - 630.0) <= 0.1 * 50.0 + 0.5 for estimate in estimates), estimates  # 0.5: the ends


def test_a_long_pause_another_cells_turn_is_subtracted_reading_for_reading(clock):
    """Side by side, a pause is another cell's turn (0.5 s at 350 W here): its energy is that
    cell's, and over half a second the counter's updates are fine enough to subtract it."""
    clock[0] = 100.0
    nvml = TickingNvml(clock)
    with GpuState(CUDA, nvml) as state:
        for _ in range(4):
            nvml.run(0.5, 300.0)
            with state.paused():
                nvml.run(0.5, 350.0)
        nvml.run(0.5, 300.0)
    fields = state.fields(TimedRegion(steps=100, batch_size=10))
    assert fields["energy_j"] == pytest.approx(750.0, rel=0.01) and fields["power_w"] == pytest.approx(300.0, rel=0.01)


def test_a_slowdown_at_either_end_or_in_between_marks_the_cell_throttled(clock):
    at_end = timed(FakeNvml(reasons=GPU_IDLE), clock, 2.0, reasons=SW_THERMAL)
    assert at_end["throttled"] is True and at_end["throttle_reasons"] == ["sw_thermal_slowdown"]
    # Came and went between the readings: only the cumulative violation counter shows it.
    between = timed(FakeNvml(power_ns=5_000), clock, 2.0, power_ns=905_000)
    assert between["throttled"] is True and between["throttle_reasons"] == ["power_cap_violation"]
    idle = timed(FakeNvml(reasons=GPU_IDLE), clock, 2.0)  # idle is a state, not a slowdown
    assert idle["throttled"] is False


def test_a_reading_nvml_does_not_support_is_null_and_named_the_rest_stand(clock):
    nvml = FakeNvml()
    nvml.unsupported = {"energy_mj"}  # e.g. a GPU older than Volta
    fields = timed(nvml, clock, 2.0)
    assert fields["energy_j"] is None and fields["power_w"] is None
    assert fields["sm_clock_mhz_end"] == 1980 and fields["throttled"] is False
    assert fields["gpu_state_note"] == "NVML did not report: energy"


def test_a_timed_region_too_short_for_the_energy_counter_gives_no_energy(clock):
    fields = timed(FakeNvml(), clock, 0.2, energy_mj=1_050)
    assert fields["energy_j"] is None and "too short" in fields["gpu_state_note"]


def test_without_nvml_every_gpu_field_is_null_and_the_note_says_why(clock):
    nvml = FakeNvml()
    nvml.init_error = OSError("libnvidia-ml.so.1: cannot open shared object file")
    fields = timed(nvml, clock, 2.0)
    assert all(fields[name] is None for name in FIELDS if name != "gpu_state_note")
    assert fields["gpu_state_note"].startswith("NVML unavailable: OSError: libnvidia-ml.so.1")


def test_on_a_cpu_nothing_is_read_and_every_field_is_null():
    nvml = FakeNvml()
    nvml.init_error = AssertionError("NVML must not be touched for a CPU cell")
    with GpuState(backend_of("cpu"), nvml) as state:
        pass
    assert state.fields(TimedRegion(steps=1, batch_size=10)) == dict.fromkeys(FIELDS)
