"""A torchvision ResNet trained from scratch: digits, generated patterns, a hub or a folder of images."""

from __future__ import annotations

import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.data.convert import check_classes, image_tensors
from amp_suite.data.generated import class_patterns
from amp_suite.data.sources import GeneratedSet, load_splits
from amp_suite.workloads.base import Classifier, LoadedData, require

tv_models = require("torchvision.models", "resnet")

GENERATED_RESOLUTION = 16  # generated images are stored small and resized like any other source


class ResNetWorkload(Classifier):
    def load_data(self) -> LoadedData:
        c = self.config
        params = {"samples": c.samples + c.data.val_samples, "num_classes": c.num_classes, "size": GENERATED_RESOLUTION}
        splits = load_splits(c.data, GeneratedSet(class_patterns, params, c.data.val_samples))
        train = image_tensors(splits.train, c.image_size, c.samples)
        validation = image_tensors(splits.validation, c.image_size, c.data.val_samples)
        check_classes(train, c.num_classes, splits.description)
        return LoadedData(train, validation, splits.description, splits.fingerprint)

    def build_model(self, train: TensorData) -> nn.Module:
        return tv_models.get_model(self.config.arch, weights=None, num_classes=self.config.num_classes)

    def to_device(self, model: nn.Module, device: torch.device) -> nn.Module:
        model = model.to(device)
        return model.to(memory_format=torch.channels_last) if self.config.channels_last else model

    def logits(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        if self.config.channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return model(inputs)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=self.config.lr, momentum=0.9, nesterov=True)


WORKLOAD = ResNetWorkload
