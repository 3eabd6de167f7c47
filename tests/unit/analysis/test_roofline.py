"""The roofline estimate of a step on a GPU the suite has not run on (amp_suite.analysis.roofline),
from op profiles measured on this CPU (amp_suite.instruments.diagnostics.op_profile)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from amp_suite.analysis.roofline import estimate_step, op_time, speedup
from amp_suite.cell.precision import make_policy
from amp_suite.hardware.peaks import gpu_spec
from amp_suite.instruments.diagnostics.op_costs import OpCost
from amp_suite.instruments.diagnostics.op_profile import profile_step

H100 = gpu_spec("NVIDIA H100 80GB HBM3")
MODES = {"fp32": "fp32", "tf32": "fp32", "bf16": "bf16"}  # each mode's profile: tf32 runs fp32's ops
V100 = gpu_spec("Tesla V100-SXM2-16GB")


def classifier_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(inputs), targets)


def profiles(model: Callable[[], nn.Module], batch: int, features: int, classes: int) -> dict:
    torch.manual_seed(0)
    inputs, targets = torch.randn(batch, features), torch.randint(0, classes, (batch,))
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.1)  # noqa: E731
    return {
        mode: profile_step(model, classifier_loss, partial(make_policy, mode, "cpu"), sgd, inputs, targets).costs()
        for mode in ("fp32", "bf16")  # tf32's ops are fp32's: the same profile, another peak
    }


def mlp(width: int, depth: int, features: int, classes: int) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        layers = [nn.Linear(features, width), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(width, classes))

    return build


def test_each_op_is_bounded_by_its_slower_roof_plus_its_launches():
    matmul = OpCost("forward", "mm", "float32", calls=1, flops=10**12, bytes=10**6, kernels=1)
    seconds = op_time(matmul, H100, "fp32")
    assert seconds.bound == "compute" and seconds.seconds == pytest.approx(1 / 67 + 5e-6)
    copy = OpCost("forward", "_to_copy", "bfloat16", calls=1, flops=0, bytes=3_350 * 10**6, kernels=1)
    assert op_time(copy, H100, "bf16").bound == "memory" and op_time(copy, H100, "bf16").seconds == pytest.approx(
        1e-3 + 5e-6
    )
    tiny = OpCost("forward", "relu", "float32", calls=1, flops=0, bytes=1024, kernels=1)
    assert op_time(tiny, H100, "fp32").bound == "launch"
    # The same matmul in bf16 runs at the bf16 tensor-core peak; a V100 has none, so fp32's rate
    bf16 = OpCost("forward", "mm", "bfloat16", calls=1, flops=10**12, bytes=10**6, kernels=1)
    assert op_time(bf16, H100, "bf16").seconds == pytest.approx(1 / 989.5 + 5e-6)
    assert op_time(bf16, V100, "bf16").seconds == pytest.approx(1 / 15.7 + 5e-6)


def test_a_matmul_heavy_step_is_compute_bound_and_amp_pays_while_a_tiny_mlps_is_launch_bound_and_does_not():
    """A 2048-wide MLP at batch 2048 spends its fp32 step in matmuls; the smoke matrix's tiny MLP
    (hidden 32, batch 64) in launches, so bf16 gains nothing on an H100 (its casts add launches)."""
    wide = profiles(mlp(2048, 2, 2048, 10), batch=2048, features=2048, classes=10)
    steps = {mode: estimate_step(wide[profile], H100, mode) for mode, profile in MODES.items()}
    assert steps["fp32"].bound == "compute" and speedup(steps["bf16"], steps["fp32"]) > 3
    assert steps["fp32"].dominant(1)[0].op in ("mm", "addmm")
    assert 1 < speedup(steps["bf16"], steps["tf32"]) < speedup(steps["bf16"], steps["fp32"])

    tiny = profiles(mlp(32, 2, 64, 10), batch=64, features=64, classes=10)
    steps = {mode: estimate_step(tiny[profile], H100, mode) for mode, profile in MODES.items()}
    assert steps["fp32"].bound == steps["bf16"].bound == "launch"
    assert 0.5 < speedup(steps["bf16"], steps["fp32"]) < 1.05  # near 1x: no gain, a little loss
