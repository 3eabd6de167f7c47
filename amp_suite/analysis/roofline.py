"""Would a mode pay off on a GPU the suite has not run on? A roofline estimate of one training step,
op by op, from its op profile (amp_suite.instruments.diagnostics.op_profile). No torch here.

Each op takes at least its FLOPs over the GPU's dense peak for the math it ran in, at least its
bytes over the memory bandwidth (the larger of the two: it can't beat either roof), plus one launch
per kernel (hardware.peaks: the table's launch_us). A step is the sum of its ops, and a mode's
estimated speedup is the reference's step time over its own. The estimate explains itself: which
ops take the time, and whether the step is compute-, memory- or launch-bound.

What it leaves out, and so where it errs: kernels that overlap the host's launches of the next
ones (the step is the sum), caches (every byte comes from memory), kernels below their peak (every
matmul runs at the datasheet's rate), and any fusion beyond its costs' (instruments.diagnostics.op_costs:
each op its own kernel in eager PyTorch; compiled, Inductor's fusion as a rule of thumb).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from amp_suite.config.precisions import MATH_OF_DTYPE, REFERENCE_MATH, float32_math
from amp_suite.hardware.peaks import GpuSpec

Bound = Literal["compute", "memory", "launch"]
BOUNDS: tuple[Bound, ...] = ("compute", "memory", "launch")


class OpCostLike(Protocol):
    phase: str
    op: str
    dtype: str
    flops: int
    bytes: int
    kernels: int


@dataclass(frozen=True)
class OpTime:
    phase: str
    op: str
    dtype: str
    seconds: float
    bound: Bound


@dataclass(frozen=True)
class StepEstimate:
    """One mode's step on one GPU: its time, what bounds it, and the ops that take the most."""

    gpu: str
    precision: str
    seconds: float
    seconds_by_bound: dict[str, float]  # compute, memory, launch: the time of the ops each bounds
    ops: list[OpTime] = field(default_factory=list)  # slowest first

    @property
    def bound(self) -> Bound:
        return max(BOUNDS, key=lambda bound: self.seconds_by_bound.get(bound, 0.0))

    def dominant(self, count: int = 3) -> list[OpTime]:
        return self.ops[:count]

    def dominant_names(self, count: int = 2) -> list[str]:
        """The slowest ops as tables name them: "backward mm"."""
        return [f"{t.phase} {t.op}" for t in self.dominant(count)]


def op_time(cost: OpCostLike, gpu: GpuSpec, precision: str) -> OpTime:
    """The op's roofline time on the GPU under the mode, and which roof (or its launches) bounds it.
    An op whose math the GPU has no peak for (bf16, or TF32, on a V100) runs at its float32 rate."""
    own = float32_math(precision)
    peaks = gpu.peak_tflops
    peak = peaks.get(MATH_OF_DTYPE.get(cost.dtype, own)) or peaks.get(own) or peaks[REFERENCE_MATH]
    compute = cost.flops / (float(peak) * 1e12)
    memory = cost.bytes / (gpu.memory_gbps * 1e9)
    launch = cost.kernels * gpu.launch_us * 1e-6
    work = max(compute, memory)
    bound: Bound = "launch" if launch > work else ("compute" if compute >= memory else "memory")
    return OpTime(cost.phase, cost.op, cost.dtype, work + launch, bound)


def estimate_step(costs: Sequence[OpCostLike], gpu: GpuSpec, precision: str) -> StepEstimate:
    """The step of `costs` (the mode's op profile) on the GPU."""
    times = sorted((op_time(cost, gpu, precision) for cost in costs), key=lambda t: -t.seconds)
    by_bound = {bound: sum(t.seconds for t in times if t.bound == bound) for bound in BOUNDS}
    return StepEstimate(gpu.name, precision, sum(t.seconds for t in times), by_bound, times)


def speedup(mode: StepEstimate, reference: StepEstimate) -> float:
    """The reference's step time over the mode's: above 1, the mode is estimated faster."""
    return reference.seconds / mode.seconds


@dataclass(frozen=True)
class CellEstimate:
    """One cell of a matrix (a workload configuration at a batch, in a mode) estimated on one GPU."""

    label: str  # the workload's label in the matrix
    config: dict  # the configuration the report matches published figures by, layout included
    batch: int
    step: StepEstimate

    @property
    def precision(self) -> str:
        return self.step.precision

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.step.seconds
