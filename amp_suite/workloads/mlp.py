"""A tiny MLP: so little arithmetic per kernel that launch overhead dominates, and AMP gains little."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import datasets
import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.data.convert import vector_tensors
from amp_suite.data.generated import teacher_vectors
from amp_suite.workloads.base import Classifier


class MLPWorkload(Classifier):
    generator = staticmethod(teacher_vectors)

    def generator_params(self) -> dict[str, Any]:
        return {"in_features": self.config.in_features, "num_classes": self.config.num_classes}

    def tensors(self, split: datasets.Dataset, limit: int) -> TensorData:
        return vector_tensors(split, limit)

    def build_model(self, train: TensorData) -> nn.Module:
        c = self.config
        layers: list[nn.Module] = []
        width = train.inputs.shape[1]  # 64 for digits, in_features for generated vectors
        for _ in range(c.depth):
            layers += [nn.Linear(width, c.hidden), nn.ReLU()]
            width = c.hidden
        layers.append(nn.Linear(width, c.num_classes))
        return nn.Sequential(*layers)

    def logits(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        return model(inputs)

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # loss_multiplier < 1 shrinks every gradient: the failure-modes matrix uses it to push them
        # below fp16's smallest subnormal, where an unscaled fp16 backward flushes them to zero.
        # At 1 it is skipped: multiplying by one changes no value but adds two kernels to each step.
        loss = super().loss(model, inputs, targets)
        return loss if self.config.loss_multiplier == 1 else loss * self.config.loss_multiplier

    def optimizer(self, parameters: Iterable[nn.Parameter], **implementation: bool) -> torch.optim.Optimizer:
        return torch.optim.AdamW(parameters, lr=self.config.lr, eps=self.config.adam_eps, **implementation)


WORKLOAD = MLPWorkload
