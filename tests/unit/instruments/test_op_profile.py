"""One training step, op by op (amp_suite.instruments.diagnostics.op_profile): the FLOPs the record
counts, the bytes each mode's dtypes move, and the kernels a CUDA device would launch."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from amp_suite.cell.precision import make_policy
from amp_suite.instruments.diagnostics.flops import CORRECTED_RULES
from amp_suite.instruments.diagnostics.op_profile import PHASES, profile_step

MATMULS = {"mm", "addmm", "bmm", "convolution", "convolution_backward"}


def classifier_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(inputs), targets)


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-3)


def profile(build: Callable[[], nn.Module], precision: str, inputs: torch.Tensor, targets: torch.Tensor):
    return profile_step(build, classifier_loss, lambda: make_policy(precision, "cpu"), adamw, inputs, targets).costs()


def small_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))


def test_the_per_op_flops_add_up_to_the_flop_counters_total_for_the_step():
    torch.manual_seed(0)
    model, inputs, targets = small_cnn(), torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    counter = FlopCounterMode(display=False, custom_mapping=CORRECTED_RULES)
    with counter:  # a real step, counted as the record's flops_per_step is; the profile's runs on fake tensors
        classifier_loss(model, inputs, targets).backward()
    costs = profile(small_cnn, "fp32", inputs, targets)
    assert sum(c.flops for c in costs) == counter.get_total_flops() > 0
    assert {c.phase for c in costs} == set(PHASES)
    assert all(c.flops == 0 for c in costs if c.phase == "optimizer")  # elementwise: no matmul FLOPs
    assert {c.op for c in costs if c.flops} <= MATMULS


def test_a_resnet50_step_at_batch_256_in_fp16_profiles_in_seconds_on_fake_tensors():
    """No arithmetic runs: the step's ops, their shapes and dtypes (a CPU without fp16 units would
    take minutes over one real fp16 step of it)."""
    import time

    import torchvision

    started = time.monotonic()
    inputs, targets = torch.empty(256, 3, 224, 224), torch.zeros(256, dtype=torch.long)
    costs = profile(torchvision.models.resnet50, "fp16", inputs, targets)
    assert time.monotonic() - started < 30
    flops = sum(c.flops for c in costs if c.phase != "optimizer")
    assert 6.0e12 < flops < 6.6e12  # 3 x 2 x 4.1 GMAC x 256
    assert {c.dtype for c in costs if c.flops} == {"float16"}


def test_a_linears_matmul_moves_half_the_bytes_in_bf16_and_the_same_flops():
    torch.manual_seed(0)
    inputs, targets = torch.randn(64, 256), torch.randint(0, 128, (64,))
    by_mode = {mode: profile(lambda: nn.Linear(256, 128), mode, inputs, targets) for mode in ("fp32", "bf16")}
    forward = {
        mode: [c for c in costs if c.phase == "forward" and c.op in MATMULS] for mode, costs in by_mode.items()
    }
    (fp32,), (bf16,) = forward["fp32"], forward["bf16"]
    assert (fp32.dtype, bf16.dtype) == ("float32", "bfloat16")
    assert bf16.bytes * 2 == fp32.bytes and bf16.flops == fp32.flops > 0
    # autocast's cast of the weight and input is an op of its own, which fp32 does not pay
    assert any(c.op == "_to_copy" and c.dtype == "bfloat16" for c in by_mode["bf16"])
    assert not any(c.op == "_to_copy" for c in by_mode["fp32"] if c.phase == "forward")


def test_views_launch_nothing_and_the_optimizers_foreach_step_launches_per_tensor_list():
    torch.manual_seed(0)
    def model() -> nn.Module:
        return nn.Sequential(*(nn.Linear(16, 16) for _ in range(4)))  # 8 parameters

    costs = profile(model, "fp32", torch.randn(8, 16), torch.randint(0, 16, (8,)))
    views = [c for c in costs if c.op in ("t", "view", "transpose", "expand", "device")]
    assert views and all(c.kernels == 0 and c.bytes == 0 for c in views)
    optimizer = [c for c in costs if c.phase == "optimizer"]
    assert optimizer and all(c.op.startswith("_foreach_") for c in optimizer if c.kernels)
    assert sum(c.kernels for c in optimizer) < 8 * 4  # one launch per list, not one per parameter
    assert not any(c.op == "zeros_like" for c in optimizer)  # the optimizer's state exists: a steady step
