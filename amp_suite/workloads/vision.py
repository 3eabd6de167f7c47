"""`workload: torchvision`: any classification model torchvision lists, by name, trained from
scratch on the ResNet's image sources."""

from __future__ import annotations

from torch import nn

from amp_suite.data import TensorData
from amp_suite.workloads.base import require
from amp_suite.workloads.resnet import ImageClassifier, for_short_runs

tv_models = require("torchvision.models", "torchvision")


class TorchvisionWorkload(ImageClassifier):
    """Randomly initialised, with the base's AdamW: ViTs and ConvNeXts do not train on the ResNet
    recipe's SGD at 0.1; BatchNorm statistics that follow a short run (resnet.for_short_runs)."""

    def build_model(self, train: TensorData) -> nn.Module:
        return for_short_runs(tv_models.get_model(self.config.model, weights=None, num_classes=self.config.num_classes))


WORKLOAD = TorchvisionWorkload
