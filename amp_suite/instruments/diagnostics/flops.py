"""Floating-point operations of one training step, counted by torch's FlopCounterMode, and the rest
of the step's arithmetic beside them.

FlopCounterMode counts the operations tensor cores run (matmuls, convolutions, attention) in the
forward, the loss and the backward; elementwise work and the optimizer step are left out, as in the
usual definition of model FLOPs. That count is `flops_per_step`, what TFLOP/s and MFU are built on.
In the same pass every other floating-point op (elementwise ops, reductions, normalisations,
softmax, losses, activations, and their backwards) is counted one FLOP per element of its
floating-point outputs, so that the matmul share of a step's arithmetic can be told: the tensor-core
claims hold for a model whose arithmetic is mostly matmuls, not for one that is mostly elementwise.

The count runs once, on a copy of the model, outside the timed steps; for a mode that swaps layers
(fp8), on the model as written (cell.pipeline.prepare), so that every mode of a workload counts the
same FLOPs and their TFLOP/s and MFU compare.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count, sdpa_backward_flop_count, sdpa_flop_count

from amp_suite.instruments.diagnostics import PrecisionStep


@dataclass(frozen=True)
class StepFlops:
    """One step's arithmetic in two parts: `matmul`, FlopCounterMode's count (matmuls, convolutions,
    attention), and `other`, one FLOP per floating-point element each other arithmetic op output."""

    matmul: int
    other: int

    @property
    def total(self) -> int:
        return self.matmul + self.other

    @property
    def matmul_share(self) -> float | None:
        """matmul / (matmul + other); None for a step with no arithmetic at all."""
        return self.matmul / self.total if self.total else None


def _conv_backward_flop(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                        _output_padding, _groups, output_mask, out_shape=None, **kwargs) -> int:  # fmt: skip
    """Each multiply-add of a convolution's forward has one in the input's gradient and one in the
    weight's, whatever the groups. torch 2.14.1's own rule counts the weight's gradient as a dense
    convolution over all channels: `groups` times too many for grouped and depthwise convolutions
    (MobileNet's and EfficientNet's backward counted 30-40x their forward)."""
    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (bool(output_mask[0]) + bool(output_mask[1]))


def _cpu_attention_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_attention_backward_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                                 **kwargs) -> int:  # fmt: skip
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# Rules FlopCounterMode lacks or gets wrong in this torch: the CPU's fused attention (its own op,
# which the counter does not know: attention's matmuls went uncounted on a CPU), and grouped
# convolutions' backward.
CORRECTED_RULES = {
    torch.ops.aten.convolution_backward: _conv_backward_flop,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flop,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flop,
}


# Ops that output floating-point tensors but do no arithmetic on them, by aten name (in-place
# forms, `fill_`, count as their name without the trailing underscore): copies and dtype
# conversions, concatenation, padding, gathers and scatters of whole values, selections (where,
# masked_fill), and tensors made from nothing (factories, random numbers).
NOT_ARITHMETIC = frozenset({
    # copies, conversions, rearrangements that materialise a view's result
    "_to_copy", "copy", "clone", "contiguous", "lift_fresh_copy", "_unsafe_view", "_reshape_alias",
    "cat", "stack", "constant_pad_nd", "repeat", "roll", "flip", "alias_copy",
    # gathers, scatters and selections of whole values
    "embedding", "index", "index_select", "gather", "take", "masked_select", "masked_scatter",
    "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter", "index_put",
    "where", "masked_fill", "tril", "triu",
    # factories: filled or uninitialised, and random
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "zero", "ones", "ones_like", "new_ones",
    "full", "full_like", "new_full", "fill", "scalar_tensor", "arange", "linspace", "logspace", "eye",
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
    "normal", "uniform", "exponential", "geometric", "cauchy", "log_normal", "random", "multinomial",
    # storage and metadata
    "set", "resize", "resize_as",
})  # fmt: skip


def _base_name(func: torch._ops.OpOverload) -> str:
    name = func._overloadpacket.__name__
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


class OtherArithmetic(TorchDispatchMode):
    """Counts, one per element of their floating-point outputs, the ops FlopCounterMode doesn't.

    An op counts unless (1) FlopCounterMode counts it (its packet is in that counter's registry:
    the two counts never overlap), (2) it is a view or alias (`OpOverload.is_view`: view, reshape,
    t, transpose, expand, slice, detach, ...) or a view's materialised copy (the `view_copy` tag),
    or (3) it is named in NOT_ARITHMETIC. Ops whose outputs aren't floating point (comparisons,
    integer index arithmetic, masks) count nothing, and a reduction counts its outputs, not its
    inputs. Entered outside FlopCounterMode, it sees the ops that counter runs after decomposing
    those it has no rule for, so each op that executes is seen once.
    """

    supports_higher_order_operators = True

    def __init__(self, counted: dict[Any, Any]) -> None:
        super().__init__()
        self.counted = counted  # FlopCounterMode's registry (packets) for this count
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if isinstance(func, torch._ops.HigherOrderOperator):
            return NotImplemented  # as FlopCounterMode does for those it has no rule for
        out = func(*args, **(kwargs or {}))
        if self.counts(func):
            self.flops += sum(
                t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()
            )
        return out

    def counts(self, func: torch._ops.OpOverload) -> bool:
        if func._overloadpacket in self.counted or func.is_view or torch.Tag.view_copy in func.tags:
            return False
        return _base_name(func) not in NOT_ARITHMETIC


def count_step_flops(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    policy: PrecisionStep,
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> StepFlops:
    """FLOPs of forward + loss + backward for one batch (the same for every precision): the matmul
    FLOPs, with the step's other arithmetic counted in the same pass."""
    model = copy.deepcopy(model)  # the measured model's weights and gradients stay untouched
    counter = FlopCounterMode(display=False, custom_mapping=CORRECTED_RULES)
    other = OtherArithmetic(counter.flop_registry)
    with other, counter:
        with policy.forward_context():
            loss = loss_fn(model, inputs, targets)
        policy.backward(loss)
    return StepFlops(int(counter.get_total_flops()), other.flops)
