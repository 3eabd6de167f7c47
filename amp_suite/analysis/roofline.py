"""Would a mode pay off on a GPU the suite has not run on? A roofline estimate of one training step,
op by op, from its op profile (amp_suite.instruments.diagnostics.op_profile). No torch here.

Two sides run at once. The GPU's work: each op takes at least its FLOPs over the GPU's dense peak
for the math it ran in, and at least its bytes over the memory bandwidth (the larger of the two: it
can't beat either roof), and the ops run back to back. The host's launches: every kernel costs the
host `launch_us` (hardware.peaks: the table's assumption; or one measured on the host that ran,
instruments.launches), and the host launches ahead of the GPU, queueing its kernels. So a step takes
the slower of the two, not their sum: host-bound where launching the kernels takes longer than
running them, as on a cloud VM whose host takes 40 us a kernel; compute- or memory-bound otherwise,
by the roof that bounds most of the GPU's time. A mode's estimated speedup is the reference's step
time over its own; the estimate explains itself: its bound and which ops take the time.

What it leaves out, and so where it errs: the start of a step, before the queue fills, and any sync
that drains it (the two sides overlap completely here); a kernel's own floor of a few microseconds
on the GPU (a tiny op costs its bytes alone); caches (every byte comes from memory); kernels below
their peak (every matmul runs at the datasheet's rate); and any fusion beyond its costs'
(instruments.diagnostics.op_costs: each op its own kernel in eager PyTorch; compiled, Inductor's
fusion as a rule of thumb).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import yaml

from amp_suite.config.precisions import MATH_OF_DTYPE, REFERENCE_MATH, float32_math
from amp_suite.hardware.peaks import PEAKS_FILE, GpuSpec

Roof = Literal["compute", "memory"]
Bound = Literal["compute", "memory", "host"]
BOUNDS: tuple[Bound, ...] = ("compute", "memory", "host")
HOST_BOUND: Bound = "host"


@dataclass(frozen=True)
class Host:
    """A host the estimate assumes: its cost per kernel, and where that figure comes from."""

    name: str  # "a good host"
    launch_us: float
    source: str


@functools.cache
def host_range() -> tuple[Host, ...]:
    """The ends of the range of hosts an estimate for a GPU you don't own shows, the good one first
    (the peak table's `hosts`: each says whether it is assumed or measured, and where)."""
    hosts = yaml.safe_load(PEAKS_FILE.read_text(encoding="utf-8"))["hosts"]
    found = [Host(str(h["name"]), float(h["launch_us"]), str(h["source"])) for h in hosts]
    return tuple(sorted(found, key=lambda host: host.launch_us))


class OpCostLike(Protocol):
    phase: str
    op: str
    dtype: str
    flops: int
    bytes: int
    kernels: int


@dataclass(frozen=True)
class OpTime:
    """One op's GPU time (its slower roof) and the host's time launching its kernels."""

    phase: str
    op: str
    dtype: str
    seconds: float  # on the GPU
    bound: Roof  # which roof bounds its GPU time
    kernels: int = 0
    launch_seconds: float = 0.0  # on the host


@dataclass(frozen=True)
class StepEstimate:
    """One mode's step on one GPU, behind a host of `launch_us` a kernel: the GPU's work, the host's
    launches, what bounds the step, and the ops that take the most of it."""

    gpu: str
    precision: str
    gpu_seconds: float  # every op's roofline time, back to back
    host_seconds: float  # every kernel's launch
    launch_us: float  # the host's cost per kernel the estimate assumed
    ops: list[OpTime] = field(default_factory=list)  # slowest on the GPU first

    @property
    def seconds(self) -> float:
        """The step: the slower of the host's launches and the GPU's work, which overlap."""
        return max(self.gpu_seconds, self.host_seconds)

    @property
    def kernels(self) -> int:
        return sum(t.kernels for t in self.ops)

    @property
    def bound(self) -> Bound:
        if self.host_seconds > self.gpu_seconds:
            return HOST_BOUND
        compute = sum(t.seconds for t in self.ops if t.bound == "compute")
        return "compute" if compute >= self.gpu_seconds - compute else "memory"

    def dominant(self, count: int = 3) -> list[OpTime]:
        """The ops that take the most of the side that sets the pace: launches, where the host does."""
        if self.bound != HOST_BOUND:
            return self.ops[:count]
        return sorted(self.ops, key=lambda t: -t.launch_seconds)[:count]

    def dominant_names(self, count: int = 2) -> list[str]:
        """The slowest ops as tables name them: "backward mm"."""
        return [f"{t.phase} {t.op}" for t in self.dominant(count)]


def op_time(cost: OpCostLike, gpu: GpuSpec, precision: str) -> OpTime:
    """The op's roofline time on the GPU under the mode, which roof bounds it, and its launches on the
    host. An op whose math the GPU has no peak for (bf16, or TF32, on a V100) runs at its float32 rate."""
    own = float32_math(precision)
    peaks = gpu.peak_tflops
    peak = peaks.get(MATH_OF_DTYPE.get(cost.dtype, own)) or peaks.get(own) or peaks[REFERENCE_MATH]
    compute = cost.flops / (float(peak) * 1e12)
    memory = cost.bytes / (gpu.memory_gbps * 1e9)
    roof: Roof = "compute" if compute >= memory else "memory"
    launches = cost.kernels * gpu.launch_us * 1e-6
    return OpTime(cost.phase, cost.op, cost.dtype, max(compute, memory), roof, cost.kernels, launches)


def estimate_step(costs: Sequence[OpCostLike], gpu: GpuSpec, precision: str) -> StepEstimate:
    """The step of `costs` (the mode's op profile) on the GPU, behind a host of the GPU spec's launch_us."""
    times = sorted((op_time(cost, gpu, precision) for cost in costs), key=lambda t: -t.seconds)
    gpu_seconds = sum(t.seconds for t in times)
    host_seconds = sum(t.launch_seconds for t in times)
    return StepEstimate(gpu.name, precision, gpu_seconds, host_seconds, gpu.launch_us, times)


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

    @property
    def host_bound(self) -> bool:
        return self.step.bound == HOST_BOUND
