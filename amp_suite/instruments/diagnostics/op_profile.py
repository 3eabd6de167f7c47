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

import copy
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from amp_suite.instruments.diagnostics import PrecisionStep
from amp_suite.instruments.diagnostics.flops import CORRECTED_RULES

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
        view = _is_view(func_packet)
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
    model: nn.Module,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    policy: PrecisionStep,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> list[OpCost]:
    """One training step of a copy of the model (the one given stays untouched) under the policy:
    forward + loss, backward, and the optimizer's step, each op's cost by phase. A step runs first,
    unprofiled, so that the profiled one is a steady step (the optimizer's state exists)."""
    model = copy.deepcopy(model)
    optimizer = make_optimizer(model)
    for group in optimizer.param_groups:  # the multi-tensor step a CUDA device takes, on any device
        group["foreach"] = True

    def step(profiler: OpProfiler | None = None) -> None:
        optimizer.zero_grad(set_to_none=True)
        with policy.forward_context():
            loss = loss_fn(model, inputs, targets)
        if profiler:
            profiler.phase = "backward"
        policy.backward(loss)
        if profiler:
            profiler.phase = "optimizer"
        optimizer.step()

    step()  # the first step also creates the optimizer's state: not what every other step costs
    profiler = OpProfiler()
    with profiler:
        step(profiler)
    return profiler.profile()


def as_dicts(costs: list[OpCost]) -> list[dict[str, Any]]:
    return [asdict(cost) for cost in costs]


def _is_view(packet: torch._ops.OpOverloadPacket) -> bool:
    """A view or alias op (view, t, transpose, expand, slice, ...): metadata only, no kernel, no bytes."""
    overloads = [getattr(packet, name) for name in packet.overloads()]
    return bool(overloads) and all(overload.is_view for overload in overloads)


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
