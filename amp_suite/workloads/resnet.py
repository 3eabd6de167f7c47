"""A torchvision ResNet trained from scratch: digits, generated patterns, a hub or a folder of images.
Its image classifier serves the models named from torchvision too (amp_suite.workloads.vision)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import datasets
import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.data.convert import image_tensors
from amp_suite.data.generated import class_patterns
from amp_suite.workloads.base import Classifier, require

tv_models = require("torchvision.models", "resnet")

GENERATED_RESOLUTION = 16  # generated images are stored small and resized like any other source


class ImageClassifier(Classifier):
    """RGB images at the config's image_size, num_classes logits."""

    generator = staticmethod(class_patterns)

    def generator_params(self) -> dict[str, Any]:
        return {"num_classes": self.config.num_classes, "size": GENERATED_RESOLUTION}

    def tensors(self, split: datasets.Dataset, limit: int) -> TensorData:
        return image_tensors(split, self.config.image_size, limit)

    def logits(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        out = model(inputs)
        # GoogLeNet and Inception v3 train with auxiliary heads: their outputs are named tuples.
        return out.logits if hasattr(out, "logits") else out


# A library's recipe may set its BatchNorms' momentum for hundreds of epochs: torchvision's
# MobileNetV3 and EfficientNet use 0.01, so after a benchmark's 60 steps their running statistics are
# still about half their initial 0 and 1 (0.99^60 = 0.55) and every validation scored chance, while
# the training loss fell. At PyTorch's default, 0.1, they follow the last ten or so batches. It
# changes no training step (train mode normalises by the batch's own statistics); only evaluation.
SHORT_RUN_NORM_MOMENTUM = 0.1
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)  # timm's subclass them


def for_short_runs(model: nn.Module) -> nn.Module:
    """The model, its slower BatchNorms' running statistics set to follow a benchmark's few steps."""
    for module in model.modules():
        if isinstance(module, BATCH_NORMS) and module.momentum is not None:
            module.momentum = max(module.momentum, SHORT_RUN_NORM_MOMENTUM)
    return model


class ResNetWorkload(ImageClassifier):
    def build_model(self, train: TensorData) -> nn.Module:
        return tv_models.get_model(self.config.arch, weights=None, num_classes=self.config.num_classes)

    def optimizer(self, parameters: Iterable[nn.Parameter], **implementation: bool) -> torch.optim.Optimizer:
        # torch.optim.SGD has a fused kernel too (torch/optim/sgd.py): nesterov momentum, GradScaler's flags.
        return torch.optim.SGD(parameters, lr=self.config.lr, momentum=0.9, nesterov=True, **implementation)


WORKLOAD = ResNetWorkload
