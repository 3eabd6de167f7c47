"""The host's own cores as the device: peak memory is the process's resident set, a step is
timed on the host's clock, and nothing is queued, so nothing needs synchronising.

No torch here: the live methods import it when they run."""

from __future__ import annotations

import os
import platform
import resource
import shutil
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_suite.hardware.backends import Backend, register

if TYPE_CHECKING:
    import torch

    from amp_suite.instruments.diagnostics.host_syncs import SyncCount
    from amp_suite.instruments.timers import CpuStepTimer
    from amp_suite.records.machine import DeviceCaps


@register
class CpuBackend(Backend):
    type = "cpu"
    is_host = True
    ray_resource = "CPU"  # a CPU rank holds a core
    process_group = "gloo"
    new_process_mb = 0.0  # no context: a process costs its resident set, which the cell's own figure counts
    reports_oom = False  # the kernel's OOM killer ends the process instead
    autotunes_convolutions = False
    visible_devices = None
    default_matrix = "smoke.yaml"
    peak_memory_kind = "cpu_peak_rss"
    launch_method = (
        "per-op dispatch cost of a tiny eager op on this CPU (no launch queue: each op runs where it is called)"
    )

    def caps(self) -> DeviceCaps:
        from amp_suite.records.machine import cpu_caps

        return cpu_caps(*_cpuinfo())

    def synchronize(self) -> None:
        """Nothing is queued: each op has run when it returns."""

    def release_cached_blocks(self) -> None:
        """No caching allocator between the process and the memory it holds."""

    def reset_peak_memory(self) -> str:
        try:  # Linux resets the resident-set high-water mark when "5" is written to clear_refs
            Path("/proc/self/clear_refs").write_text("5")
            return self.peak_memory_kind
        except OSError:
            return "cpu_peak_rss_since_process_start"

    def peak_memory_mb(self) -> tuple[float, float | None]:
        high_water_kb = _proc_kb(Path("/proc/self/status"), "VmHWM:")
        return (high_water_kb or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024, None  # kB on Linux

    def held(self) -> dict[str, float]:
        """The resident set, and the memory Linux can give without swapping."""
        return {"held_mb": _proc_kb(Path("/proc/self/status"), "VmRSS:") / 1024,
                "free_mb": _proc_kb(Path("/proc/meminfo"), "MemAvailable:") / 1024}  # fmt: skip

    def memory_at_oom(self) -> dict[str, float | str]:
        return {}  # a CPU raises no out-of-memory error of this kind: the OOM killer ends the worker

    def step_timer(self, steps: int) -> CpuStepTimer:
        from amp_suite.instruments.timers import CpuStepTimer

        return CpuStepTimer(steps)

    def gpu_reader(self, nvml: Any = None) -> None:
        return None

    def host_syncs(self, optimizer: torch.optim.Optimizer) -> AbstractContextManager[SyncCount]:
        from amp_suite.instruments.diagnostics.host_syncs import count_host_reads

        return count_host_reads(optimizer)

    def device_time_ms(self, work: Any) -> float:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as traced:
            work()
        return sum(event.self_cpu_time_total for event in traced.key_averages()) / 1e3

    def compile_blocker(self) -> str | None:
        if _cpp_compiler() is None:
            return "torch.compile on a CPU builds C++ kernels and no C++ compiler is on PATH (install g++ or set CXX)"
        return None

    def rank_device(self, local_rank: int) -> torch.device:
        import torch

        return torch.device("cpu")

    def take_for_rank(self) -> None:
        """One intra-op thread per rank, as torchrun sets: a rank stands for one device, world size N
        uses N cores. Several threads per rank make OpenMP's spinning workers fight gloo's own
        threads for the cores (measured on a 2-core box: a 1.5 ms MLP step took 47 ms)."""
        import torch

        torch.set_num_threads(1)


def _cpp_compiler() -> str | None:
    """The compiler inductor would call for CPU kernels (its config, then CXX), if it is installed."""
    import torch._inductor.config

    candidates = [os.environ.get("CXX"), *torch._inductor.config.cpp.cxx]
    return next((path for name in candidates if name and (path := shutil.which(name))), None)


def _proc_kb(path: Path, key: str) -> float:
    """A "Key:   123 kB" line of a /proc file; 0 where there is none."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def _cpuinfo() -> tuple[str, frozenset[str]]:
    """CPU model name and feature flags; empty flags where /proc/cpuinfo does not exist."""
    name, flags = platform.processor() or platform.machine(), frozenset()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return name, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and value.strip():
            name = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = frozenset(value.split())
    return name, flags
