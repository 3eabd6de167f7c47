"""The roofline estimate of a step on a GPU the suite has not run on (amp_suite.analysis.roofline),
from op profiles measured on this CPU (amp_suite.instruments.diagnostics.op_profile)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from amp_suite.analysis.roofline import estimate_step, host_range, op_time, speedup
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


def test_each_op_is_bounded_by_its_slower_roof_and_its_launches_are_the_hosts():
    matmul = OpCost("forward", "mm", "float32", calls=1, flops=10**12, bytes=10**6, kernels=1)
    timed = op_time(matmul, H100, "fp32")
    assert timed.bound == "compute" and timed.seconds == pytest.approx(1 / 67)
    assert timed.launch_seconds == pytest.approx(5e-6) and timed.kernels == 1
    copy = OpCost("forward", "_to_copy", "bfloat16", calls=1, flops=0, bytes=3_350 * 10**6, kernels=1)
    assert op_time(copy, H100, "bf16").bound == "memory" and op_time(copy, H100, "bf16").seconds == pytest.approx(1e-3)
    # The same matmul in bf16 runs at the bf16 tensor-core peak; a V100 has none, so fp32's rate
    bf16 = OpCost("forward", "mm", "bfloat16", calls=1, flops=10**12, bytes=10**6, kernels=1)
    assert op_time(bf16, H100, "bf16").seconds == pytest.approx(1 / 989.5)
    assert op_time(bf16, V100, "bf16").seconds == pytest.approx(1 / 15.7)


def step_of(gpu_ms: float, kernels: int, launch_us: float):
    """A step of one memory-bound op of `gpu_ms` on an H100, and `kernels` tiny launches beside it."""
    costs = [
        OpCost("forward", "_to_copy", "float32", calls=1, flops=0, bytes=int(gpu_ms * 1e-3 * 3_350e9), kernels=1),
        OpCost("forward", "relu", "float32", calls=kernels - 1, flops=0, bytes=0, kernels=kernels - 1),
    ]
    return estimate_step(costs, replace(H100, launch_us=launch_us), "fp32")


def test_a_step_is_the_slower_of_the_hosts_launches_and_the_gpus_work_not_their_sum():
    """The host queues kernels ahead of the GPU: 1 ms of GPU work behind 100 launches of 5 µs (0.5
    ms) takes 1 ms, not 1.5; behind 47 µs a launch (4.7 ms) the host sets the pace."""
    good = step_of(gpu_ms=1.0, kernels=100, launch_us=5)
    assert good.gpu_seconds == pytest.approx(1e-3) and good.host_seconds == pytest.approx(0.5e-3)
    assert good.seconds == pytest.approx(1e-3) and good.bound == "memory" and good.kernels == 100
    slow = step_of(gpu_ms=1.0, kernels=100, launch_us=47)
    assert slow.seconds == pytest.approx(4.7e-3) and slow.bound == "host"
    assert slow.dominant_names(1) == ["forward relu"]  # host-bound: the ops with the most launches
    assert speedup(good, slow) == pytest.approx(4.7)


def test_the_range_of_hosts_runs_from_a_good_one_to_a_slow_one_each_with_its_source():
    good, *_, slow = host_range()
    assert good.launch_us == H100.launch_us  # the good host is the one the table assumes
    assert good.launch_us < slow.launch_us
    assert good.source.startswith("assumed") and slow.source.startswith(("assumed", "measured"))


def test_a_matmul_heavy_step_is_compute_bound_and_amp_pays_while_a_tiny_mlps_is_launch_bound_and_does_not():
    """A 2048-wide MLP at batch 2048 spends its fp32 step in matmuls; the smoke matrix's tiny MLP
    (hidden 32, batch 64) in the host's launches, so bf16 gains nothing on an H100 (its casts add
    launches)."""
    wide = profiles(mlp(2048, 2, 2048, 10), batch=2048, features=2048, classes=10)
    steps = {mode: estimate_step(wide[profile], H100, mode) for mode, profile in MODES.items()}
    assert steps["fp32"].bound == "compute" and speedup(steps["bf16"], steps["fp32"]) > 3
    assert steps["fp32"].dominant(1)[0].op in ("mm", "addmm")
    assert 1 < speedup(steps["bf16"], steps["tf32"]) < speedup(steps["bf16"], steps["fp32"])

    tiny = profiles(mlp(32, 2, 64, 10), batch=64, features=64, classes=10)
    steps = {mode: estimate_step(tiny[profile], H100, mode) for mode, profile in MODES.items()}
    assert steps["fp32"].bound == steps["bf16"].bound == "host"
    assert 0.5 < speedup(steps["bf16"], steps["fp32"]) < 1.05  # near 1x: no gain, a little loss
