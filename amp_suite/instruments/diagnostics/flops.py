"""Floating-point operations of one training step, counted by torch's FlopCounterMode.

It counts the operations tensor cores run (matmuls, convolutions, attention) in the forward, the
loss and the backward; elementwise work and the optimizer step are left out, as in the usual
definition of model FLOPs. The count runs once, on a copy of the model, outside the timed steps;
for a mode that swaps layers (fp8), on the model as written (cell.pipeline.prepare), so that every
mode of a workload counts the same FLOPs and their TFLOP/s and MFU compare.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from amp_suite.cell.precision import PrecisionPolicy


def count_step_flops(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    policy: PrecisionPolicy,
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> int:
    """FLOPs of forward + loss + backward for one batch (the same for every precision)."""
    model = copy.deepcopy(model)  # the measured model's weights and gradients stay untouched
    with FlopCounterMode(display=False) as counter:
        with policy.forward_context():
            loss = loss_fn(model, inputs, targets)
        policy.backward(loss)
    return int(counter.get_total_flops())
