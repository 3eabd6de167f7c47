"""torch.compile as a matrix axis: can this platform compile, and the compiled model.

Only the model is compiled; autograd compiles its backward with it. The loop around it (autocast,
GradScaler, clipping, the optimizer step) stays the article's loop, as in PyTorch's recipe for
torch.compile with AMP. Graphs are compiled in the first steps, which are warmup: the timed steps
run compiled code (enough warmup steps are the matrix's business; compile time is recorded).
Under CUDA graphs only the model's forward and backward are graphed: the optimizer step, clipping
and GradScaler stay eager, so their launches (and fp16's host sync, unless the optimizer is fused:
config fused_optimizer) remain the host's.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn


def unsupported_reason(device: torch.device, mode: str) -> str | None:
    """Why `mode` can't run on this platform, or None. Checked before building anything, so the
    cell is skipped with the reason instead of failing half-way through its warmup."""
    if mode == "off":
        return None
    import torch._dynamo  # torch imports its compiler stack lazily; so does an eager-only cell

    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile is not supported with this Python or platform (TorchDynamo unavailable)"
    if device.type == "cpu" and _cpp_compiler() is None:
        return "torch.compile on a CPU builds C++ kernels and no C++ compiler is on PATH (install g++ or set CXX)"
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            major, minor = torch.cuda.get_device_capability(device)
            return f"torch.compile needs Triton on this GPU: not installed, or compute capability {major}.{minor} < 7.0"
        return _triton_build_gap()
    return None


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


def compiled(model: nn.Module, mode: str) -> nn.Module:
    """The model as the training step calls it: itself when mode is "off"."""
    return model if mode == "off" else torch.compile(model, mode=mode)


# CUDA graph trees (torch/_inductor/cudagraph_trees.py) run a compiled function's first call as a
# warmup in the graphs' memory pool, record it on the second and replay it from the third on: a
# matrix that times such a mode needs at least this many warmup steps before its timed ones.
CALLS_BEFORE_REPLAY = 3


def uses_cuda_graphs(mode: str) -> bool:
    """Whether `mode` replays CUDA graphs (on a GPU; a CPU ignores the option)."""
    import torch._inductor

    return mode != "off" and bool(torch._inductor.list_mode_options(mode).get("triton.cudagraphs"))


def kept_output(mode: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """How the training step keeps a tensor past the step (the loss, for the loss curve).

    A graph output under CUDA graphs lives in the graph's memory pool, which the next replay
    overwrites ("accessing tensor output of CUDAGraphs that has been overwritten"): it must be
    copied out, one scalar copy a step. Eager outputs are fresh tensors: detaching is enough, and
    an eager cell pays for no copy."""
    return _detached_copy if uses_cuda_graphs(mode) else torch.Tensor.detach


def _detached_copy(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().clone()


def _cpp_compiler() -> str | None:
    """The compiler inductor would call for CPU kernels (its config, then CXX), if it is installed."""
    import torch._inductor.config

    candidates = [os.environ.get("CXX"), *torch._inductor.config.cpp.cxx]
    return next((path for name in candidates if name and (path := shutil.which(name))), None)
