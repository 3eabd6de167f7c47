"""Models by name from torchvision and timm: built for a benchmark's short run."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from amp_suite.config.workloads import TimmConfig, TorchvisionConfig
from amp_suite.workloads.resnet import SHORT_RUN_NORM_MOMENTUM, for_short_runs


def _norms(model: nn.Module) -> list[nn.BatchNorm2d]:
    return [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]


@pytest.mark.parametrize(
    ("config", "module"),
    [
        (TorchvisionConfig(workload="torchvision", model="mobilenet_v3_small", num_classes=10, image_size=32,
                           batch_sizes=[4]), "amp_suite.workloads.vision"),  # fmt: skip
        (TimmConfig(workload="timm", model="mobilenetv3_small_050", num_classes=10, image_size=32, batch_sizes=[4]),
         "amp_suite.workloads.timm_models"),  # fmt: skip
    ],
)
def test_a_named_model_s_slow_batchnorm_statistics_follow_a_short_run(config, module):
    """torchvision's MobileNetV3 sets momentum 0.01: after 60 steps its running statistics would still
    be half their initial values, and validation would score chance while the loss fell."""
    import importlib

    workload = importlib.import_module(module).WORKLOAD(config)
    model = workload.build_model(None)
    assert _norms(model) and all(m.momentum == SHORT_RUN_NORM_MOMENTUM for m in _norms(model))


def test_a_faster_momentum_or_a_cumulative_average_is_left_as_the_model_has_it():
    model = nn.Sequential(nn.BatchNorm2d(3, momentum=0.3), nn.BatchNorm2d(3, momentum=None), nn.LayerNorm(3))
    for_short_runs(model)
    assert [m.momentum for m in _norms(model)] == [0.3, None]
    model.train()(torch.ones(2, 3, 3, 3))  # still a model that runs
