"""What one training step asks of a device, op by op: its FLOPs, the tensors it reads and writes,
and its kernels.

The input of a roofline estimate for GPUs the suite has not run on (op_costs turns the calls into
costs, eager or compiled; amp_suite.analysis.roofline times them). The
profile is measured once, on any device (the CPU included), under the mode's own forward context
and with its own layers (fp8's Float8Linear), so each op's bytes are those of the dtypes that mode
casts it to (a Linear's matmul under bf16 autocast reads and writes half the bytes of fp32's).

Per op call, in its phase (forward, the loss included; backward; optimizer):
    flops    FlopCounterMode's count (matmuls, convolutions, attention): the same FLOPs as the
             record's flops_per_step, which the per-op figures add up to
    reads,   the tensors it reads and writes, each numel x element size, and which value of which
    writes   tensor each is, so that a compiled costing can tell what stays in registers (an
             in-place op reads and writes its tensor; a view and an allocation move nothing)
    kernels  the launches an eager CUDA device would make: none for a view, an alias or an empty
             allocation; one for any other op; one per FOREACH_TENSORS_PER_LAUNCH tensors of a
             `_foreach_*` op (the optimizer's multi-tensor kernels)
    dtype    the dtype it ran in: its first floating-point output's (a float8 matmul's: float8)
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode
from torch.utils.weak import WeakIdKeyDictionary

from amp_suite.instruments.diagnostics import PrecisionStep
from amp_suite.instruments.diagnostics.flops import CORRECTED_RULES
from amp_suite.instruments.diagnostics.op_costs import OpCall, StepProfile, TensorUse


class TrainingStep(PrecisionStep, Protocol):
    """A precision policy's whole step, the optimizer's part included: fp16's GradScaler unscales
    the gradients and steps (and skips) through the optimizer, kernels a step pays for; fp8's
    swaps layers before any of it."""

    def convert_module(self, model: nn.Module) -> nn.Module: ...
    def bind(self, optimizer: torch.optim.Optimizer) -> None: ...
    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None: ...
    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None: ...


PHASES = ("forward", "backward", "optimizer")
OPTIMIZER_COPIES = 4  # what the optimizer's step holds per parameter: itself, its gradient, AdamW's two moments
# PyTorch's multi_tensor_apply packs a list of tensors into launches of a few dozen to ~110 tensors
# (its depth-dependent chunking, aten/src/ATen/native/cuda/MultiTensorApply.cuh); the smaller figure
# for the deeper lists an optimizer passes (params, grads and state together).
FOREACH_TENSORS_PER_LAUNCH = 36
# Ops that allocate or describe memory without a kernel of their own.
NO_KERNEL = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
                       "lift_fresh", "_local_scalar_dense", "set_", "resize_",
                       "_record_function_enter", "_record_function_enter_new", "_record_function_exit"})  # fmt: skip


class ProfileTooLarge(ValueError):
    """The step's real tensors would not fit in this machine's memory: nothing was allocated."""


class OpProfiler(FlopCounterMode):
    """FlopCounterMode that also records every op it runs, with the tensors it reads and writes
    and the kernels it launches. Every op that executes reaches `_count_flops` once (the counter
    decomposes those it has no rule for first), so the per-op FLOPs add up to the counter's total.

    A tensor subclass (torchao's Float8TrainingTensor) is counted as the tensors it holds: a
    float8 matmul's operands are one byte an element, whatever dtype the subclass shows."""

    def __init__(self) -> None:
        super().__init__(display=False, custom_mapping=CORRECTED_RULES)
        self.phase = PHASES[0]
        self.calls: list[OpCall] = []
        self._storages: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> its storage's id (a view: its base's)
        self._values: dict[int, int] = {}  # storage -> the value it holds now
        self._ids = itertools.count()

    def _count_flops(self, func_packet, out, args, kwargs):
        before = self.get_total_flops()
        result = super()._count_flops(func_packet, out, args, kwargs)
        name = func_packet.__name__
        inputs, outputs = _stored((args, kwargs)), _stored(out)
        # A view moves nothing, and nor does an op that answers a question about its input
        # (prim.device, sizes) rather than writing a tensor, nor an allocation.
        moves = not _is_view(func_packet) and name not in NO_KERNEL and (bool(outputs) or name.endswith("_"))
        if moves:
            reads = tuple(self._read(t) for t in inputs)
            # an in-place op writes its first argument (a `_foreach_*_` returns nothing)
            changed = outputs or (_stored(args[0]) if name.endswith("_") and args else [])
            writes = tuple(self._write(t) for t in changed)
        else:
            reads = writes = ()
            self._alias(outputs, inputs)
        flops = self.get_total_flops() - before
        self.calls.append(OpCall(
            self.phase, name, _ran_in(out, args, inputs, matmul=flops > 0),
            flops, reads, writes, _launches(name, args) if moves else 0,
            reduces=moves and _reduces(out, (args, kwargs)), arguments=_arguments((args, kwargs)),
        ))  # fmt: skip
        return result

    def profile(self) -> StepProfile:
        return StepProfile(tuple(self.calls))

    def _storage(self, tensor: torch.Tensor) -> int:
        if tensor not in self._storages:
            self._storages[tensor] = next(self._ids)
        return self._storages[tensor]

    def _read(self, tensor: torch.Tensor) -> TensorUse:
        storage = self._storage(tensor)
        if storage not in self._values:
            self._values[storage] = next(self._ids)
        return TensorUse(self._values[storage], _size(tensor))

    def _write(self, tensor: torch.Tensor) -> TensorUse:
        self._values[self._storage(tensor)] = value = next(self._ids)
        return TensorUse(value, _size(tensor))

    def _alias(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
        """A view's outputs hold its inputs' storage, one for one where it views each (a float8
        tensor's data and scale), else the first's; an allocation's hold new ones."""
        bases = inputs if len(inputs) == len(outputs) else inputs[:1] * len(outputs)
        for tensor, base in zip(outputs, bases, strict=False):  # an allocation: no bases, new storages
            self._storages[tensor] = self._storage(base)


def profile_step(
    build_model: Callable[[], nn.Module],
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    make_policy: Callable[[], TrainingStep],
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    batch_size: int | None = None,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> StepProfile:
    """One training step under a fresh policy, its ops by phase.

    The forward (with the loss) and the backward run on fake tensors (torch's FakeTensorMode: every
    op's shapes and dtypes, no arithmetic), on a model built on the meta device and moved there: a
    ResNet-50 at batch 256 profiles in a second on any CPU, in any mode, fp16 too on a CPU without
    fp16 units. With `batch_size`, `inputs` and `targets` are examples (a sample is enough): the
    step runs on a fake batch of that many of their samples, in `memory_format`, so that no batch
    is ever held. The optimizer's step (GradScaler's unscale and step included), whose cost is the
    parameters' and not the batch's, runs for real, on zeros of the parameters' shapes: its second
    step, once its state exists."""
    profiler = OpProfiler()
    built = _on_meta(build_model)
    with FakeTensorMode(allow_non_fake_inputs=True):
        policy = make_policy()
        model = policy.convert_module(_on_fake_tensors(built))  # fp8's Float8Linear layers, on fake tensors too
        check_optimizer_fits(model)
        policy.bind(make_optimizer(model))
        if batch_size is not None:
            inputs, targets = (_fake_batch(example, batch_size, memory_format) for example in (inputs, targets))
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
        if not group.get("fused"):  # a fused optimizer's own kernel (torch runs foreach where both are set)
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


def check_optimizer_fits(model: nn.Module) -> None:
    """Raise ProfileTooLarge where the optimizer's step, which runs on real tensors, would hold more
    than half this machine's memory: a model's size is a record's or a config's word (a Hugging Face
    config of 70B parameters is a few hundred bytes), and the host's OOM killer is no answer."""
    trained = [p for p in model.parameters() if p.requires_grad]
    held = OPTIMIZER_COPIES * sum(p.numel() * p.element_size() for p in trained)
    limit = _memory_bytes() // 2
    if held > limit:
        raise ProfileTooLarge(
            f"profiling its step would hold {held / 2**30:,.1f} GiB of real tensors (its parameters,"
            f" gradients and AdamW's two moments, for the optimizer's step); half this machine's memory"
            f" is {limit / 2**30:,.1f} GiB"
        )


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _on_meta(build_model: Callable[[], nn.Module]) -> nn.Module:
    """The model built on the meta device: shapes, no memory, whatever its size. Not inside
    FakeTensorMode: there every module's `.to()` fails ("Couldn't swap Embedding.weight": the
    mode keeps a weak reference to each fake tensor, which torch.utils.swap_tensors refuses), and
    Hugging Face's models call `.to(torch.float32)` as they are built."""
    with torch.device("meta"):
        return build_model()


def _on_fake_tensors(model: nn.Module) -> nn.Module:
    """The model with each parameter, buffer and tensor attribute replaced by an empty CPU tensor of
    its shape, strides and dtype (a fake one, inside FakeTensorMode). A tensor that several modules
    share (tied input and output embeddings) stays one tensor, as the optimizer and the backward
    see it in training. A user's model built on the CPU is replaced the same way."""
    made: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (the original, kept alive; its stand-in)

    def stand_in(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in made:
            empty = torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype, device="cpu")
            fake = nn.Parameter(empty, tensor.requires_grad) if isinstance(tensor, nn.Parameter) else empty
            made[id(tensor)] = (tensor, fake)
        return made[id(tensor)][1]

    for module in model.modules():
        for table in (module._parameters, module._buffers, module.__dict__):
            for name, value in list(table.items()):
                if isinstance(value, torch.Tensor):
                    table[name] = stand_in(value)
    return model


def _fake_batch(example: torch.Tensor, batch_size: int, memory_format: torch.memory_format) -> torch.Tensor:
    """`batch_size` samples shaped as the example's, in its dtype, as an empty (fake) tensor; a 4-D
    batch in `memory_format` (channels_last, where the cell trains so)."""
    layout = memory_format if example.dim() == 4 and memory_format != torch.preserve_format else None
    shape = (batch_size, *example.shape[1:])
    return torch.empty(shape, dtype=example.dtype, memory_format=layout or torch.contiguous_format)


def _is_view(packet: torch._ops.OpOverloadPacket) -> bool:
    """A view or alias op (view, t, transpose, expand, slice, ...): metadata only, no kernel, no bytes."""
    overloads = [getattr(packet, name) for name in packet.overloads()]
    return bool(overloads) and all(overload.is_view for overload in overloads)


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _stored(tree: Any) -> list[torch.Tensor]:
    """The distinct tensors in `tree` that hold memory: a wrapper subclass's inner tensors in its place."""
    found: dict[int, torch.Tensor] = {}
    pending = _tensors(tree)
    while pending:
        tensor = pending.pop(0)
        if is_traceable_wrapper_subclass(tensor):
            names, _ = tensor.__tensor_flatten__()
            pending[:0] = [getattr(tensor, name) for name in names]
        else:
            found.setdefault(id(tensor), tensor)
    return list(found.values())


def _arguments(tree: Any) -> str:
    """The arguments that are not tensors (a clamp's bounds, a cast's dtype), as text."""
    return repr([leaf for leaf in tree_leaves(tree) if not isinstance(leaf, torch.Tensor)])


def _size(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _reduces(out: Any, inputs: Any) -> bool:
    """An output with fewer elements than the largest input (an amax, a sum, a norm's statistics)."""
    outputs, read = _tensors(out), _tensors(inputs)
    return bool(outputs and read) and min(t.numel() for t in outputs) < max(t.numel() for t in read)


def _launches(name: str, args: tuple) -> int:
    if not name.startswith("_foreach_"):
        return 1
    listed = max((len(a) for a in args if isinstance(a, (list, tuple))), default=1)
    return math.ceil(listed / FOREACH_TENSORS_PER_LAUNCH)


def _ran_in(out: Any, args: tuple, stored_inputs: list[torch.Tensor], matmul: bool) -> str:
    """The dtype of the op's first floating-point output; an in-place op (a `_foreach_*_` returns
    nothing) runs in its first floating-point input's. A matmul on float8 operands runs in float8,
    whatever it writes (torchao's writes bfloat16)."""
    if matmul:
        float8 = [t.dtype for t in stored_inputs if t.dtype.is_floating_point and t.element_size() == 1]
        if float8:
            return _name(float8[0])
    for tree in (out, args):
        floating = [t.dtype for t in tree_leaves(tree) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if floating:
            return _name(floating[0])
    return "other"


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
