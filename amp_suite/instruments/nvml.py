"""One GPU through NVML: found by UUID, every query guarded on its own, clock-event reasons decoded.

NVML numbers GPUs in PCI order and ignores CUDA_VISIBLE_DEVICES, so torch's device index can name
another GPU there; the UUID from torch's device properties names the same one in both. Drivers
and bindings differ in what they offer (the clock-event-reasons call is newer than R525 drivers,
energy needs Volta, a MIG slice hides most readings), so each query fails alone: the reading is
None and its name is kept in `missing`, and every other reading stands.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import cache
from types import ModuleType
from typing import Any

import torch

# pynvml's constants, spelled here so that a stand-in NVML module needs none of them.
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
NVML_TEMPERATURE_GPU = 0  # the die

# Reasons that mean the GPU ran slower than it could. The others NVML reports (idle, application
# clocks, sync boost, display clock) are settings or states, not slowdowns.
SLOWDOWNS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
     "board_limit", "reliability"}
)  # fmt: skip
# Newer name first: nvmlClocksEventReason* replaced nvmlClocksThrottleReason*, but only the older
# family names board limit and reliability.
_REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
_NOT_A_REASON = {"None", "All", "UserDefinedClocks"}  # masks, and a deprecated alias of ApplicationsClocksSetting


class NvmlDevice:
    """Queries to one GPU's NVML handle; `missing` names the readings NVML could not give."""

    def __init__(self, nvml: ModuleType, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self.missing: list[str] = []
        self.uuid: str | None = None  # the spelling NVML knew the device by

    @classmethod
    def open(cls, device: torch.device, nvml: ModuleType | None = None) -> NvmlDevice:
        """Raises when NVML can't be loaded or doesn't know the device (no driver library, ...)."""
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        error: Exception | None = None
        for uuid in uuid_spellings(device):
            try:
                opened = cls(nvml, nvml.nvmlDeviceGetHandleByUUID(uuid))
            except Exception as exc:  # NVMLError_NotFound: the other spelling may name it
                error = error or exc
                continue
            opened.uuid = uuid
            return opened
        nvml.nvmlShutdown()
        raise error or LookupError("no UUID to look the device up by")

    def query(self, what: str, functions: str | Sequence[str], *args: Any) -> Any:
        """The first of `functions` (newest first) that answers, or None with `what` noted missing."""
        for name in [functions] if isinstance(functions, str) else functions:
            function = getattr(self.nvml, name, None)  # absent from an older nvidia-ml-py
            if function is None:
                continue
            try:
                return function(self.handle, *args)
            except Exception:  # NVMLError_NotSupported, _FunctionNotFound on an older driver, ...
                continue
        self.missing.append(what)
        return None

    def clock_event_reasons(self) -> int | None:
        return self.query(
            "clock-event reasons",
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        )

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass  # a failed shutdown costs nothing: the readings are taken


def uuid_spellings(device: torch.device) -> list[str]:
    """The device's UUID as NVML may spell it, likeliest first. torch leaves the prefix off, and
    the same digits name a whole GPU ("GPU-...") or a MIG slice ("MIG-..."); a process given MIG
    slices usually sees them named in CUDA_VISIBLE_DEVICES."""
    uuid = _torch_uuid(device)
    if uuid.startswith(("GPU-", "MIG-")):
        return [uuid]
    kinds = ("MIG", "GPU") if "MIG-" in os.environ.get("CUDA_VISIBLE_DEVICES", "") else ("GPU", "MIG")
    return [f"{kind}-{uuid}" for kind in kinds]


def nvml_uuid(device: torch.device, nvml: ModuleType | None = None) -> str:
    """The UUID NVML knows the device by; the likeliest spelling when NVML can't be asked."""
    try:
        opened = NvmlDevice.open(device, nvml)
    except Exception:  # no driver library, or NVML knows neither spelling
        return uuid_spellings(device)[0]
    opened.close()
    return opened.uuid


def _torch_uuid(device: torch.device) -> str:
    return str(torch.cuda.get_device_properties(device).uuid)


@cache
def reason_names() -> dict[int, str]:
    """Every clock-event reason bit NVML documents -> its name, from nvidia-ml-py's own constants,
    each bit once."""
    import pynvml

    names: dict[int, str] = {}
    for prefix in _REASON_PREFIXES:
        for attribute in dir(pynvml):
            name = attribute.removeprefix(prefix)
            if attribute.startswith(prefix) and name not in _NOT_A_REASON:
                names.setdefault(getattr(pynvml, attribute), _snake(name))
    return names


def decode_reasons(mask: int) -> list[str]:
    """The reasons set in an NVML clock-event mask, in bit order; an undocumented bit by number."""
    known = reason_names()
    bits = [1 << position for position in range(mask.bit_length()) if mask >> position & 1]
    return [known.get(bit, f"bit_{bit:#x}") for bit in bits]


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()
