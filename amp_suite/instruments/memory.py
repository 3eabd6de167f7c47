"""Peak memory over the timed steps, and what the allocator held when a cell ran out of memory.

CUDA: the caching allocator's peaks (allocated, and reserved from the driver). CPU: the process's
peak resident set, whose high-water mark Linux resets on request.
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import torch

from amp_suite.instruments import TimedRegion


class PeakMemory:
    """Peak memory over a region. CUDA: allocator peaks. CPU: the process's peak resident set.
    Its record fields: those the schema declares with instrument="memory"."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.kind = "cuda_max_allocated" if device.type == "cuda" else "cpu_peak_rss"
        self.peak_mb: float | None = None
        self.reserved_mb: float | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif not _reset_peak_rss():
            self.kind = "cpu_peak_rss_since_process_start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            self.reserved_mb = torch.cuda.max_memory_reserved(self.device) / 2**20
        else:
            self.peak_mb = _peak_rss_mb()

    def fields(self, region: TimedRegion) -> dict[str, Any]:
        return {"peak_memory_mb": self.peak_mb, "peak_memory_reserved_mb": self.reserved_mb,
                "peak_memory_kind": self.kind}  # fmt: skip


def held(device: torch.device) -> dict[str, float]:
    """What this process holds on its device now, and what the device has left, in MB: whether
    another cell of the same size fits beside it (amp_suite.execution.side_by_side). CUDA: the
    allocator's reserved memory (its peak, once the cell has trained) and the driver's free memory;
    CPU: the resident set and the memory Linux can give without swapping."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return {"held_mb": torch.cuda.memory_reserved(device) / 2**20, "free_mb": free / 2**20}
    return {"held_mb": _proc_kb(Path("/proc/self/status"), "VmRSS:") / 1024,
            "free_mb": _proc_kb(Path("/proc/meminfo"), "MemAvailable:") / 1024}  # fmt: skip


def _proc_kb(path: Path, key: str) -> float:
    """A "Key:   123 kB" line of a /proc file; 0 where there is none."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def release_cached_blocks(device: torch.device) -> None:
    """Return the CUDA caching allocator's unused blocks to the driver. Its reserved peak, once
    reset, starts from what is reserved at that moment: call this before the warmup, after work
    whose memory the measured steps should not inherit."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


class ForwardedOutOfMemoryError(torch.OutOfMemoryError):
    """Another process ran out of memory (a DDP rank), raised here with its allocator's figures:
    this process's allocator never held that process's tensors."""

    def __init__(self, message: str, memory: dict[str, float | str]) -> None:
        super().__init__(message)
        self.memory = memory


def memory_at_oom(device: torch.device, error: BaseException | None = None) -> dict[str, float | str]:
    """What the allocator held when a cell ran out of memory, and what the device has (CUDA): the
    figures `error` carries when it was forwarded from the process that ran out, else this one's.
    A CPU raises no out-of-memory error of this kind: the kernel's OOM killer ends the worker."""
    if isinstance(error, ForwardedOutOfMemoryError):
        return error.memory
    if device.type != "cuda":
        return {}
    return {
        "peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
        "peak_memory_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20,
        "peak_memory_kind": "cuda_max_allocated_until_oom",
        "device_memory_mb": torch.cuda.get_device_properties(device).total_memory / 2**20,
    }


def _reset_peak_rss() -> bool:
    """Linux resets the resident-set high-water mark when "5" is written to clear_refs."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


INSTRUMENT = PeakMemory  # entered around the timed steps (amp_suite.instruments.instrumented)
