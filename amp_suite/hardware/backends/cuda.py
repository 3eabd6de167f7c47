"""An NVIDIA GPU through CUDA: the caching allocator's peaks, CUDA events for the step timer,
NVML for the GPU's state, CUPTI for its kernels' time, and one synchronize where a figure is read.

No torch here: the live methods import it when they run."""

from __future__ import annotations

import os
import shutil
import sysconfig
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_suite.hardware.backends import Backend, register

if TYPE_CHECKING:
    import torch

    from amp_suite.instruments.diagnostics.host_syncs import SyncCount
    from amp_suite.instruments.nvml import NvmlDevice
    from amp_suite.instruments.timers import CudaStepTimer
    from amp_suite.records.machine import DeviceCaps


@register
class CudaBackend(Backend):
    type = "cuda"
    is_host = False
    ray_resource = "GPU"
    process_group = "nccl"
    new_process_mb = 1024.0  # a CUDA context and cuBLAS's workspace before a process's first tensor
    reports_oom = True
    autotunes_convolutions = True
    visible_devices = "CUDA_VISIBLE_DEVICES"
    default_matrix = "default.yaml"
    peak_memory_kind = "cuda_max_allocated"
    launch_method = (
        "host time to enqueue a tiny eager kernel (batches of {per_batch}, below the launch queue's"
        " depth, one synchronize after each, outside the timing)"
    )

    def caps(self) -> DeviceCaps:
        import torch

        from amp_suite.records.machine import cuda_caps

        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        return cuda_caps(torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index))

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)

    def release_cached_blocks(self) -> None:
        """Return the caching allocator's unused blocks to the driver."""
        import torch

        torch.cuda.empty_cache()

    def reset_peak_memory(self) -> str:
        import torch

        torch.cuda.reset_peak_memory_stats(self.device)
        return self.peak_memory_kind

    def peak_memory_mb(self) -> tuple[float, float | None]:
        import torch

        return torch.cuda.max_memory_allocated(self.device) / 2**20, torch.cuda.max_memory_reserved(self.device) / 2**20

    def held(self) -> dict[str, float]:
        """The allocator's reserved memory (its peak, once the cell has trained), and the driver's free memory."""
        import torch

        free, _ = torch.cuda.mem_get_info(self.device)
        return {"held_mb": torch.cuda.memory_reserved(self.device) / 2**20, "free_mb": free / 2**20}

    def memory_at_oom(self) -> dict[str, float | str]:
        import torch

        peak, reserved = self.peak_memory_mb()
        return {
            "peak_memory_mb": peak,
            "peak_memory_reserved_mb": reserved,  # type: ignore[dict-item]
            "peak_memory_kind": "cuda_max_allocated_until_oom",
            "device_memory_mb": torch.cuda.get_device_properties(self.device).total_memory / 2**20,
        }

    def step_timer(self, steps: int) -> CudaStepTimer:
        from amp_suite.instruments.timers import CudaStepTimer

        return CudaStepTimer(steps)

    def gpu_reader(self, nvml: Any = None) -> NvmlDevice:
        from amp_suite.instruments.nvml import NvmlDevice

        return NvmlDevice.open(self.device, nvml)

    def host_syncs(self, optimizer: torch.optim.Optimizer) -> AbstractContextManager[SyncCount]:
        from amp_suite.instruments.diagnostics.host_syncs import count_cuda_syncs

        return count_cuda_syncs()

    def device_time_ms(self, work: Any) -> float:
        """The kernels' durations summed (torchao's measure of a float8 benchmark), from CUPTI."""
        from amp_suite.instruments.diagnostics.gpu_work import cuda_trace

        with cuda_trace(self.device) as traced:
            work()
        spans = traced()
        if not spans:  # CUPTI saw nothing: a kernel time can't be told, and no time is not a fast one
            raise RuntimeError("the profiler's trace holds no GPU kernel (CUPTI unavailable?): no kernel time to sum")
        return sum(span.end_ns - span.start_ns for span in spans) / 1e6

    def compile_blocker(self) -> str | None:
        import torch
        from torch.utils._triton import has_triton

        if not has_triton():
            major, minor = torch.cuda.get_device_capability(self.device)
            return f"torch.compile needs Triton on this GPU: not installed, or compute capability {major}.{minor} < 7.0"
        return _triton_build_gap()

    def missing_devices(self, world_size: int) -> str | None:
        import torch

        visible = torch.cuda.device_count()
        return f"world size {world_size} needs as many GPUs; {visible} visible" if visible < world_size else None

    def rank_device(self, local_rank: int) -> torch.device:
        import torch

        return torch.device(f"cuda:{local_rank}")

    def ddp_device_ids(self) -> list[int] | None:
        return [self.device.index]

    def bound_device(self) -> torch.device | None:
        return self.device

    def take_for_rank(self) -> None:
        import torch

        torch.cuda.set_device(self.device)


def _triton_build_gap() -> str | None:
    """What Triton lacks to build its kernel launcher, a C extension it compiles at run time on
    the first compiled call (triton/runtime/build.py): a C compiler (CC, else gcc, else clang) and
    Python's headers. Without them every compiled cell on a GPU would fail in its first step."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None or shutil.which(compiler) is None:
        return (
            "torch.compile on a GPU needs a C compiler at run time (Triton builds its kernel launcher):"
            " none on PATH (install gcc or set CC)"
        )
    headers = Path(sysconfig.get_paths(scheme=_python_scheme())["include"]) / "Python.h"
    if not headers.is_file():
        return (
            "torch.compile on a GPU needs Python's C headers at run time (Triton builds its kernel launcher"
            f" against them): {headers} is missing (install python3-dev)"
        )
    return None


def _python_scheme() -> str:
    """The install scheme whose include directory Triton compiles against (as build.py picks it:
    Debian's 'posix_local' stands for 'posix_prefix')."""
    scheme = sysconfig.get_default_scheme()
    return "posix_prefix" if scheme == "posix_local" else scheme
