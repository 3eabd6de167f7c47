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

from collections.abc import Callable

import torch
from torch import nn

from amp_suite.hardware.backends import backend_of


def unsupported_reason(device: torch.device, mode: str) -> str | None:
    """Why `mode` can't run on this platform, or None. Checked before building anything, so the
    cell is skipped with the reason instead of failing half-way through its warmup."""
    if mode == "off":
        return None
    import torch._dynamo  # torch imports its compiler stack lazily; so does an eager-only cell

    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile is not supported with this Python or platform (TorchDynamo unavailable)"
    return backend_of(device).compile_blocker()


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
