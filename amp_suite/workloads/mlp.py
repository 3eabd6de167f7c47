"""A tiny MLP: so little arithmetic per kernel that launch overhead dominates, and AMP gains little."""

from __future__ import annotations

import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.data.convert import check_classes, vector_tensors
from amp_suite.data.generated import teacher_vectors
from amp_suite.data.sources import GeneratedSet, load_splits
from amp_suite.workloads.base import Classifier, LoadedData


class MLPWorkload(Classifier):
    def load_data(self) -> LoadedData:
        c = self.config
        generated = GeneratedSet(
            teacher_vectors,
            {"samples": c.samples + c.data.val_samples, "in_features": c.in_features, "num_classes": c.num_classes},
            c.data.val_samples,
        )
        splits = load_splits(c.data, generated)
        train = vector_tensors(splits.train, c.samples)
        validation = vector_tensors(splits.validation, c.data.val_samples)
        check_classes(train, c.num_classes, splits.description)
        return LoadedData(train, validation, splits.description, splits.fingerprint)

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
        return super().loss(model, inputs, targets) * self.config.loss_multiplier

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=self.config.lr, eps=self.config.adam_eps)


WORKLOAD = MLPWorkload
