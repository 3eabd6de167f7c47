"""A training step's op calls (amp_suite.instruments.diagnostics.op_profile records them) as the
costs a roofline times: eager, each op its own kernel; or compiled, as torch.compile fuses them.
No torch here.

Eager: an op reads its inputs and writes its outputs, in one launch (a `_foreach_*` op: one per
list chunk); a view moves nothing. Costs add up per phase, op and dtype.

Compiled (the forward and backward torch.compile turns into graphs; the optimizer step stays eager,
as the suite compiles only the model): an op with FLOPs (a matmul, a convolution) runs as a library
kernel with its operands and result in memory. Every other op fuses: a tensor touches memory only
where it is *realized* -
    - made by a library op, by a reduction (its result is complete only when its kernel ends), or
      outside the graph (an input, a parameter, the other phase);
    - read by a library op, by the other phase, or by nothing after it (a step's outputs: the loss,
      the gradients);
and otherwise lives in registers, recomputed in each kernel that reads it, as Inductor inlines
pointwise ops into their consumers. An op that realizes a tensor is a kernel: it reads the realized
tensors its inlined inputs come from and writes the ones it realizes. A dynamically scaled float8
cast is then two kernels, as Inductor makes it: the amax (a reduction, reading the tensor) and the
scaled cast (reading it again, writing float8).

Before that, as AOTAutograd does over the forward and backward it traces together, an op that
repeats an earlier one (the same op on the same tensor values, with the same other arguments) is
computed once: a float8 recipe that casts a tensor again in the backward reads the forward's cast.

What this leaves out: Inductor's own choices beyond the rule (a reduction fused into the kernel
that made its input, several reductions over one tensor in one pass, recomputing a realized tensor
instead of saving it), and an op it decomposes into several kernels (a normalisation is one here).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

COMPILED_PHASES = ("forward", "backward")  # what torch.compile(model) compiles: the optimizer stays eager
KERNEL_NAME_OPS = 4  # a fused kernel is named by its first few ops


@dataclass(frozen=True)
class TensorUse:
    value: int  # which value of which tensor: a view reads its base's; an in-place op writes a new one
    bytes: int


@dataclass(frozen=True)
class OpCall:
    """One op as it ran in a step: what it read and wrote, and what an eager device launches for it."""

    phase: str
    op: str
    dtype: str  # the dtype its math ran in
    flops: int
    reads: tuple[TensorUse, ...]  # each distinct tensor read (none for a view)
    writes: tuple[TensorUse, ...]  # its outputs; an in-place op's: the tensors it changes
    kernels: int  # eager launches: none for a view or an allocation
    reduces: bool  # an output smaller than its largest input: its result is whole only at its kernel's end
    arguments: str = ""  # its arguments other than tensors, as text: two calls alike in these and in reads are one

    @property
    def library(self) -> bool:
        """A matmul or convolution: cuBLAS's or cuDNN's kernel, which compile calls as it is."""
        return self.flops > 0


@dataclass(frozen=True)
class OpCost:
    """One op's (or fused kernel's) total over a step, in one phase and dtype."""

    phase: str
    op: str
    dtype: str
    calls: int
    flops: int
    bytes: int
    kernels: int


@dataclass(frozen=True)
class StepProfile:
    """One training step's op calls, in the order they ran, and their costs (each worked out once:
    a profile is timed on every GPU of the table)."""

    calls: tuple[OpCall, ...]

    def costs(self, compiled: bool = False) -> list[OpCost]:
        return self._compiled if compiled else self._eager

    @cached_property
    def _eager(self) -> list[OpCost]:
        return eager_costs(self.calls)

    @cached_property
    def _compiled(self) -> list[OpCost]:
        return compiled_costs(self.calls)


def eager_costs(calls: Iterable[OpCall]) -> list[OpCost]:
    return _totals((call.phase, call.op, call.dtype, call.flops, _moved(call.reads, call.writes), call.kernels)
                   for call in calls)  # fmt: skip


def compiled_costs(calls: Sequence[OpCall], compiled_phases: Sequence[str] = COMPILED_PHASES) -> list[OpCost]:
    return _totals(_Fusion(calls, compiled_phases).kernels())


class _Fusion:
    """The compiled step's kernels: each library or eager op as it is, each realizing fused op as a
    kernel over what it inlines."""

    def __init__(self, calls: Sequence[OpCall], compiled_phases: Sequence[str]) -> None:
        self.compiled_phases = frozenset(compiled_phases)
        self.calls = self._once(calls)
        self.producer: dict[int, OpCall] = {}
        self.consumers: dict[int, list[OpCall]] = defaultdict(list)
        for call in self.calls:
            for use in call.reads:
                self.consumers[use.value].append(call)
            for use in call.writes:
                self.producer[use.value] = call
        self.inlined: dict[int, tuple[dict[int, int], tuple[str, ...]]] = {}

    def _once(self, calls: Sequence[OpCall]) -> list[OpCall]:
        """The calls with each compiled repeat of an earlier call left out, its results read from the
        earlier call's. Not an in-place op (it changes what it reads) nor one that reads nothing."""
        kept: list[OpCall] = []
        first: dict[tuple, OpCall] = {}
        same: dict[int, int] = {}  # a repeat's result -> the first call's
        for call in calls:
            reads = tuple(TensorUse(same.get(use.value, use.value), use.bytes) for use in call.reads)
            call = replace(call, reads=reads) if reads != call.reads else call
            repeatable = call.phase in self.compiled_phases and reads and not call.op.endswith("_") and call.kernels
            key = (call.op, call.dtype, call.arguments, tuple(use.value for use in reads), len(call.writes))
            earlier = first.get(key) if repeatable else None
            if earlier is None:
                if repeatable:
                    first[key] = call
                kept.append(call)
                continue
            same.update((mine.value, theirs.value) for mine, theirs in zip(call.writes, earlier.writes, strict=True))
        return kept

    def fuses(self, call: OpCall) -> bool:
        return call.phase in self.compiled_phases and not call.library and call.kernels > 0

    def realized(self, value: int) -> bool:
        made_by = self.producer.get(value)
        if made_by is None or not self.fuses(made_by) or made_by.reduces:
            return True
        readers = self.consumers.get(value, [])
        return not readers or any(not self.fuses(c) or c.phase != made_by.phase for c in readers)

    def kernels(self) -> Iterable[tuple[str, str, str, int, int, int]]:
        for call in self.calls:
            if not self.fuses(call):
                yield call.phase, call.op, call.dtype, call.flops, _moved(call.reads, call.writes), call.kernels
                continue
            written = [use for use in call.writes if self.realized(use.value)]
            if not written:
                continue  # inlined into the kernels that read its result
            read, ops = self._reads(call)
            moved = sum(read.values()) + sum(use.bytes for use in written)
            yield call.phase, _kernel_name(ops), call.dtype, 0, moved, 1

    def _reads(self, call: OpCall) -> tuple[dict[int, int], tuple[str, ...]]:
        """The realized tensors the call's kernel reads (value -> bytes), and the ops it runs, the
        inlined ones first, in the order they ran."""
        read: dict[int, int] = {}
        ops: dict[str, None] = {}
        for use in call.reads:
            if self.realized(use.value):
                read.setdefault(use.value, use.bytes)
            else:
                inlined_reads, inlined_ops = self._inlined(use.value)
                read.update(inlined_reads)
                ops.update(dict.fromkeys(inlined_ops))
        ops[call.op] = None
        return read, tuple(ops)

    def _inlined(self, value: int) -> tuple[dict[int, int], tuple[str, ...]]:
        if value not in self.inlined:
            self.inlined[value] = self._reads(self.producer[value])
        return self.inlined[value]


def _kernel_name(ops: tuple[str, ...]) -> str:
    """A fused kernel by the ops it runs, in order ("fused abs+max"); a kernel of one op by its name."""
    if len(ops) == 1:
        return ops[0]
    return "fused " + "+".join(ops[:KERNEL_NAME_OPS]) + ("+…" if len(ops) > KERNEL_NAME_OPS else "")


def _moved(reads: Sequence[TensorUse], writes: Sequence[TensorUse]) -> int:
    return sum(use.bytes for use in reads) + sum(use.bytes for use in writes)


def _totals(rows: Iterable[tuple[str, str, str, int, int, int]]) -> list[OpCost]:
    totals: dict[tuple[str, str, str], list[int]] = {}
    for phase, op, dtype, flops, moved, kernels in rows:
        total = totals.setdefault((phase, op, dtype), [0, 0, 0, 0])
        total[0] += 1
        total[1] += flops
        total[2] += moved
        total[3] += kernels
    return [OpCost(phase, op, dtype, *total) for (phase, op, dtype), total in totals.items()]
