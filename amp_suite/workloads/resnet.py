"""A torchvision ResNet trained from scratch on images of class-specific patterns plus noise."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from amp_suite.data import TensorData
from amp_suite.workloads.base import Workload, require

tv_models = require("torchvision.models", "resnet")


class ResNetWorkload(Workload):
    def build_model(self) -> nn.Module:
        c = self.config
        return tv_models.get_model(c.arch, weights=None, num_classes=c.num_classes)

    def make_data(self, generator: torch.Generator) -> TensorData:
        c = self.config
        labels = torch.randint(c.num_classes, (c.samples,), generator=generator)
        # Each class is a smooth random pattern (upsampled from 4x4); samples add pixel noise.
        patterns = torch.randn(c.num_classes, 3, 4, 4, generator=generator)
        patterns = F.interpolate(patterns, size=c.image_size, mode="bilinear", align_corners=False)
        noise = torch.randn(c.samples, 3, c.image_size, c.image_size, generator=generator)
        return TensorData(patterns[labels] + noise, labels)

    def to_device(self, model: nn.Module, data: TensorData, device: torch.device):
        model, data = super().to_device(model, data, device)
        if self.config.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model, data

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.config.channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return F.cross_entropy(model(inputs), targets)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.config.lr, momentum=0.9, nesterov=True)


WORKLOAD = ResNetWorkload
