"""The training step loop: the AMP recipe's loop and nothing else.

Autocast wraps forward + loss only; backward, unscaling, clipping and the optimizer step run
outside it. The loop never branches on precision or workload: the policy and workload objects
carry the differences.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from amp_suite.cell.precision import PrecisionPolicy
from amp_suite.data import DeviceBatches
from amp_suite.workloads.base import Workload

Curves = tuple[torch.Tensor, torch.Tensor]  # (losses, gradient norms), one per step, on the device


@dataclass
class Trainer:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    policy: PrecisionPolicy
    workload: Workload
    max_grad_norm: float
    # How the loss outlives its step: a copy under CUDA graphs, whose next replay overwrites it
    # (compilation.kept_output); a plain detach otherwise.
    keep: Callable[[torch.Tensor], torch.Tensor] = torch.Tensor.detach

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One training step; returns (loss, gradient norm) as device tensors."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.policy.forward_context():
            loss = self.workload.loss(self.model, inputs, targets)
        self.policy.backward(loss)
        self.policy.unscale_gradients(self.optimizer)  # clip true gradients, not scaled ones
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.policy.optimizer_step(self.optimizer)
        return self.keep(loss), grad_norm.detach()

    def run(
        self,
        batches: DeviceBatches,
        steps: int,
        timer: AbstractContextManager[object] | None = None,
        on_step: Callable[[int], None] | None = None,
    ) -> Curves:
        """Train `steps` steps. Losses and gradient norms stay on the device (no per-step sync)
        until the caller reads them."""
        timer = timer if timer is not None else nullcontext()
        losses, grad_norms = [], []
        for index in range(steps):
            inputs, targets = batches.next()
            with timer:
                loss, grad_norm = self.step(inputs, targets)
            losses.append(loss)
            grad_norms.append(grad_norm)
            if on_step is not None:
                on_step(index + 1)
        if not losses:
            empty = torch.empty(0, device=batches.order.device)
            return empty, empty
        return torch.stack(losses), torch.stack(grad_norms)
