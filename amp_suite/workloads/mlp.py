"""A tiny MLP: so little arithmetic per kernel that launch overhead dominates, and AMP gains little."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from amp_suite.data import TensorData
from amp_suite.workloads.base import Workload


class MLPWorkload(Workload):
    def build_model(self) -> nn.Module:
        c = self.config
        layers: list[nn.Module] = []
        width = c.in_features
        for _ in range(c.depth):
            layers += [nn.Linear(width, c.hidden), nn.ReLU()]
            width = c.hidden
        layers.append(nn.Linear(width, c.num_classes))
        return nn.Sequential(*layers)

    def make_data(self, generator: torch.Generator) -> TensorData:
        c = self.config
        inputs = torch.randn(c.samples, c.in_features, generator=generator)
        # Labels from a fixed random linear teacher: learnable, and far from trivial at init.
        teacher = torch.randn(c.in_features, c.num_classes, generator=generator)
        return TensorData(inputs, (inputs @ teacher).argmax(dim=1))

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(inputs), targets)


WORKLOAD = MLPWorkload
