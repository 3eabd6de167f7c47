"""torch.compile as a matrix axis: can this platform compile, and the compiled model.

Only the model is compiled; autograd compiles its backward with it. The loop around it (autocast,
GradScaler, clipping, the optimizer step) stays the article's loop, as in PyTorch's recipe for
torch.compile with AMP. Graphs are compiled in the first steps, which are warmup: the timed steps
run compiled code (enough warmup steps are the matrix's business; compile time is recorded).
"""

from __future__ import annotations

import os
import shutil

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
    return None


def compiled(model: nn.Module, mode: str) -> nn.Module:
    """The model as the training step calls it: itself when mode is "off"."""
    return model if mode == "off" else torch.compile(model, mode=mode)


def _cpp_compiler() -> str | None:
    """The compiler inductor would call for CPU kernels (its config, then CXX), if it is installed."""
    import torch._inductor.config

    candidates = [os.environ.get("CXX"), *torch._inductor.config.cpp.cxx]
    return next((path for name in candidates if name and (path := shutil.which(name))), None)
