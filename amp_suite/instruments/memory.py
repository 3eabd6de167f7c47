"""Peak memory over the timed steps, and what the allocator held when a cell ran out of memory.

The device's backend reads it (amp_suite.hardware.backends): on CUDA the caching allocator's peaks
(allocated, and reserved from the driver); on a CPU the process's peak resident set, whose
high-water mark Linux resets on request.
"""

from __future__ import annotations

from typing import Any

import torch

from amp_suite.instruments import LiveDevice, TimedRegion


class PeakMemory:
    """Peak memory over a region, as the device's backend reads it.
    Its record fields: those the schema declares with instrument="memory"."""

    def __init__(self, device: LiveDevice) -> None:
        self.device = device
        self.kind = device.peak_memory_kind
        self.peak_mb: float | None = None
        self.reserved_mb: float | None = None

    def __enter__(self) -> PeakMemory:
        self.kind = self.device.reset_peak_memory()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak_mb, self.reserved_mb = self.device.peak_memory_mb()

    def fields(self, region: TimedRegion) -> dict[str, Any]:
        return {"peak_memory_mb": self.peak_mb, "peak_memory_reserved_mb": self.reserved_mb,
                "peak_memory_kind": self.kind}  # fmt: skip


class ForwardedOutOfMemoryError(torch.OutOfMemoryError):
    """Another process ran out of memory (a DDP rank), raised here with its allocator's figures:
    this process's allocator never held that process's tensors."""

    def __init__(self, message: str, memory: dict[str, float | str]) -> None:
        super().__init__(message)
        self.memory = memory


def memory_at_oom(device: LiveDevice, error: BaseException | None = None) -> dict[str, float | str]:
    """What the allocator held when a cell ran out of memory, and what the device has: the figures
    `error` carries when it was forwarded from the process that ran out, else this one's. A CPU
    raises no out-of-memory error of this kind: the kernel's OOM killer ends the worker."""
    if isinstance(error, ForwardedOutOfMemoryError):
        return error.memory
    return device.memory_at_oom()


INSTRUMENT = PeakMemory  # entered around the timed steps (amp_suite.instruments.instrumented)
