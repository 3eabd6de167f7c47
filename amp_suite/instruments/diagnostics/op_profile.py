"""What one training step asks of a device, op by op: its FLOPs, the bytes it moves and its kernels.

The input of a roofline estimate for GPUs the suite has not run on: an op takes at least its FLOPs
over the device's peak for its math, at least its bytes over the memory bandwidth, and a launch per
kernel. The profile is measured once, on any device (the CPU included), under the mode's own
forward context, so each op's bytes are those of the dtypes that mode casts it to (a Linear's
matmul under bf16 autocast reads and writes half the bytes of fp32's).

Per op and phase (forward, the loss included; backward; optimizer):
    flops    FlopCounterMode's count (matmuls, convolutions, attention): the same FLOPs as the
             record's flops_per_step, which the per-op figures add up to
    bytes    the tensors it reads and the ones it writes, each numel x element size (an in-place op
             reads and writes its tensor; a view moves nothing)
    kernels  the launches a CUDA device would make: none for a view, an alias or an empty
             allocation; one for any other op; one per FOREACH_TENSORS_PER_LAUNCH tensors of a
             `_foreach_*` op (the optimizer's multi-tensor kernels)
    dtype    the dtype it ran in: its first floating-point output's
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from amp_suite.instruments.diagnostics import PrecisionStep
from amp_suite.instruments.diagnostics.flops import CORRECTED_RULES


class TrainingStep(PrecisionStep, Protocol):
    """A precision policy's whole step, the optimizer's part included: fp16's GradScaler unscales
    the gradients and steps (and skips) through the optimizer, kernels a step pays for."""

    def bind(self, optimizer: torch.optim.Optimizer) -> None: ...
    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None: ...
    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...

PHASES = ("forward", "backward", "optimizer")
# PyTorch's multi_tensor_apply packs a list of tensors into launches of a few dozen to ~110 tensors
# (its depth-dependent chunking, aten/src/ATen/native/cuda/MultiTensorApply.cuh); the smaller figure
# for the deeper lists an optimizer passes (params, grads and state together).
FOREACH_TENSORS_PER_LAUNCH = 36
# Ops that allocate or describe memory without a kernel of their own.
NO_KERNEL = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
                       "lift_fresh", "_local_scalar_dense", "set_", "resize_",
                       "_record_function_enter", "_record_function_enter_new", "_record_function_exit"})  # fmt: skip


@dataclass(frozen=True)
class OpCost:
    """One op's total over a step, in one phase and dtype."""

    phase: str
    op: str
    dtype: str
    calls: int
    flops: int
    bytes: int
    kernels: int


class OpProfiler(FlopCounterMode):
    """FlopCounterMode that also records, for every op it runs, the bytes and kernels beside the FLOPs.
    Every op that executes reaches `_count_flops` once (the counter decomposes those it has no rule
    for first), so the per-op FLOPs add up to the counter's total."""

    def __init__(self) -> None:
        super().__init__(display=False, custom_mapping=CORRECTED_RULES)
        self.phase = PHASES[0]
        self.costs: dict[tuple[str, str, str], list[int]] = {}  # (phase, op, dtype) -> [calls, flops, bytes, kernels]

    def _count_flops(self, func_packet, out, args, kwargs):
        before = self.get_total_flops()
        result = super()._count_flops(func_packet, out, args, kwargs)
        name = func_packet.__name__
        # A view moves nothing, and nor does an op that answers a question about its input
        # (prim.device, sizes) rather than writing a tensor; an in-place op (`add_`) writes its input.
        view = _is_view(func_packet) or (not _tensors(out) and not name.endswith("_"))
        moved = 0 if view else _bytes((args, kwargs)) + _bytes(out)  # read, then written (in place: both)
        totals = self.costs.setdefault((self.phase, name, _ran_in(out, args)), [0, 0, 0, 0])
        totals[0] += 1
        totals[1] += self.get_total_flops() - before
        totals[2] += moved
        totals[3] += 0 if view or name in NO_KERNEL else _launches(name, args)
        return result

    def profile(self) -> list[OpCost]:
        return [OpCost(phase, op, dtype, *totals) for (phase, op, dtype), totals in self.costs.items()]


def profile_step(
    build_model: Callable[[], nn.Module],
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    make_policy: Callable[[], TrainingStep],
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> list[OpCost]:
    """One training step under a fresh policy, each op's cost by phase.

    The forward (with the loss) and the backward run on fake tensors (torch's FakeTensorMode: every
    op's shapes and dtypes, no arithmetic), on a model built there: a ResNet-50 at batch 256 profiles
    in a second on any CPU, in any mode, fp16 too on a CPU without fp16 units. The optimizer's step
    (GradScaler's unscale and step included), whose cost is the parameters' and not the batch's, runs
    for real, on zeros of the parameters' shapes: its second step, once its state exists."""
    profiler = OpProfiler()
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build_model()
        policy = make_policy()
        policy.bind(make_optimizer(model))
        with profiler:
            with policy.forward_context():
                loss = loss_fn(model, inputs, targets)
            profiler.phase = "backward"
            policy.backward(loss)
        shapes = [(p.shape, p.dtype) for p in model.parameters() if p.requires_grad]
    profiler.phase = "optimizer"
    parameters = nn.ParameterList(nn.Parameter(torch.zeros(shape, dtype=dtype)) for shape, dtype in shapes)
    optimizer = make_optimizer(parameters)
    for group in optimizer.param_groups:  # the multi-tensor step a CUDA device takes, on any device
        group["foreach"] = True
    policy = make_policy()
    policy.bind(optimizer)

    def step() -> None:
        policy.unscale_gradients(optimizer)
        policy.optimizer_step(optimizer)

    policy.backward(sum(p.sum() for p in parameters) * 0.0)  # gradients, and a scale for fp16's scaler
    step()  # the first step creates the optimizer's state: not what every other step costs
    with profiler:
        step()
    return profiler.profile()


def _is_view(packet: torch._ops.OpOverloadPacket) -> bool:
    """A view or alias op (view, t, transpose, expand, slice, ...): metadata only, no kernel, no bytes."""
    overloads = [getattr(packet, name) for name in packet.overloads()]
    return bool(overloads) and all(overload.is_view for overload in overloads)


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _bytes(tree: Any) -> int:
    """The bytes of each distinct tensor in `tree` (a tensor passed twice is read once)."""
    tensors = {id(t): t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _launches(name: str, args: tuple) -> int:
    if not name.startswith("_foreach_"):
        return 1
    listed = max((len(a) for a in args if isinstance(a, (list, tuple))), default=1)
    return math.ceil(listed / FOREACH_TENSORS_PER_LAUNCH)


def _ran_in(out: Any, args: tuple) -> str:
    """The dtype of the op's first floating-point output; an in-place op (a `_foreach_*_` returns
    nothing) runs in its first floating-point input's."""
    for tree in (out, args):
        floating = [t.dtype for t in tree_leaves(tree) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if floating:
            return str(floating[0]).removeprefix("torch.")
    return "other"
