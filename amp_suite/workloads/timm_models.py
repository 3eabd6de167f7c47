"""`workload: timm`: any model timm lists, by name, trained from scratch on the ResNet's image
sources. timm is an optional extra (pip install 'amp-suite[timm]'; the image has it)."""

from __future__ import annotations

from torch import nn

from amp_suite.data import TensorData
from amp_suite.workloads.base import require
from amp_suite.workloads.resnet import ImageClassifier, for_short_runs

timm = require("timm", "timm")


class TimmWorkload(ImageClassifier):
    """Randomly initialised at the config's image size, with the base's AdamW (timm's own recipes
    train with AdamW or LAMB)."""

    def build_model(self, train: TensorData) -> nn.Module:
        c = self.config
        # A model whose size is fixed at build time (a ViT's position embeddings) is built for the
        # config's image size; the others take any size and would refuse the argument.
        fixed = timm.models.get_pretrained_cfg_value(c.model, "fixed_input_size")
        sized = {"img_size": c.image_size} if fixed else {}
        return for_short_runs(timm.create_model(c.model, pretrained=False, num_classes=c.num_classes, **sized))


WORKLOAD = TimmWorkload
