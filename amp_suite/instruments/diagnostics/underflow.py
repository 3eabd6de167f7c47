"""How much of a model's gradient lies below fp16's range: what an unscaled fp16 run would lose."""

from __future__ import annotations

import copy

import torch
from torch import nn

# float16's smallest subnormal is 2**-24 (about 6e-8); smaller magnitudes round to zero.
FP16_SMALLEST_SUBNORMAL = 2.0**-24


def grad_underflow_fraction(
    model: nn.Module, loss_fn, inputs: torch.Tensor, targets: torch.Tensor, parts: int = 1
) -> float:
    """Fraction of non-zero float32 parameter gradients (one plain fp32 backward on one batch,
    no autocast, no scaling) whose magnitude is below fp16's smallest subnormal.

    It works on a copy, so the model (its gradients, BatchNorm statistics) is left untouched;
    called before training, every precision of a workload reports the same figure at a given batch.

    `parts`: accumulate the batch's gradient over this many equal micro-batches, each loss weighted
    by its share of the batch, to hold only a micro-batch's activations. For a loss averaged over
    samples (or tokens, at a fixed sequence length) that is the batch's gradient, up to rounding;
    BatchNorm normalises each micro-batch by its own statistics, as gradient accumulation does, but
    the gradient's scale, which decides underflow, is still the whole batch's.
    """
    model = copy.deepcopy(model)
    for part_inputs, part_targets in zip(inputs.tensor_split(parts), targets.tensor_split(parts), strict=True):
        (loss_fn(model, part_inputs, part_targets) * (len(part_inputs) / len(inputs))).backward()
    below = torch.zeros((), dtype=torch.long, device=inputs.device)
    nonzero = torch.zeros((), dtype=torch.long, device=inputs.device)
    for parameter in model.parameters():
        if parameter.grad is not None:
            magnitude = parameter.grad.abs()
            nonzero += (magnitude > 0).sum()
            below += ((magnitude > 0) & (magnitude < FP16_SMALLEST_SUBNORMAL)).sum()
    return below.item() / max(nonzero.item(), 1)  # synchronises: outside any timed region
