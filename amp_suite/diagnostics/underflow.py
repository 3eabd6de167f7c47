"""How much of a model's gradient lies below fp16's range: what an unscaled fp16 run would lose."""

from __future__ import annotations

import copy

import torch
from torch import nn

# float16's smallest subnormal is 2**-24 (about 6e-8); smaller magnitudes round to zero.
FP16_SMALLEST_SUBNORMAL = 2.0**-24


def grad_underflow_fraction(model: nn.Module, loss_fn, inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of non-zero float32 parameter gradients (one plain fp32 backward on one batch,
    no autocast, no scaling) whose magnitude is below fp16's smallest subnormal.

    It works on a copy, so the model (its gradients, BatchNorm statistics) is left untouched;
    called before training, every precision of a workload reports the same figure.
    """
    model = copy.deepcopy(model)
    loss_fn(model, inputs, targets).backward()
    below = torch.zeros((), dtype=torch.long, device=inputs.device)
    nonzero = torch.zeros((), dtype=torch.long, device=inputs.device)
    for parameter in model.parameters():
        if parameter.grad is not None:
            magnitude = parameter.grad.abs()
            nonzero += (magnitude > 0).sum()
            below += ((magnitude > 0) & (magnitude < FP16_SMALLEST_SUBNORMAL)).sum()
    return below.item() / max(nonzero.item(), 1)  # synchronises: outside any timed region
