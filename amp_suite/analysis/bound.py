"""What set a GPU step's pace: the GPU's own work, or the host launching it. No torch here.

A step takes the slower of the host's launches and the GPU's work. Where a cell traced its kernels
(`gpu_busy_ms_per_step`, instruments.diagnostics.gpu_work), the share of the step the GPU sat idle
decides: at least HOST_BOUND_IDLE is host-bound (the GPU waited for work most of the step), at most
GPU_BOUND_IDLE is gpu-bound, between is mixed. Records written before the trace existed get the
best their fields allow, said as inferred: a step whose arithmetic is nearly all matmuls
(MATMUL_HEAVY_SHARE) yet used under LOW_MFU of the tensor cores' dense peak spent most of its time
doing something other than its math, and one over HIGH_MFU was the GPU's. Never a step-time
threshold: a slow host makes any step long.

Host-bound steps jitter with the host (its scheduler, its interrupts), not with the GPU: their
windows' spread is no sign that the machine changed, and the answer says what would move the bound
(CUDA graphs, a fused optimizer, a faster host) instead of asking for a quiet machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic.dataclasses import dataclass

Bound = Literal["gpu-bound", "host-bound", "mixed"]
GPU_BOUND, HOST_BOUND, MIXED = "gpu-bound", "host-bound", "mixed"
HOST_BOUND_IDLE = 0.5  # the GPU sat idle at least half the step
GPU_BOUND_IDLE = 0.2  # the GPU was busy at least 80% of the step
# Inferred, for records without a trace: a step whose FLOPs are nearly all matmuls, at MFU ...
MATMUL_HEAVY_SHARE = 0.9
LOW_MFU = 0.10  # ... below this: the tensor cores idled; the step was set elsewhere (inferred host-bound)
HIGH_MFU = 0.30  # ... above this: the math set the pace (inferred gpu-bound)
REMEDIES = "CUDA graphs (compile: reduce-overhead), a fused optimizer, or a host that launches faster"


@dataclass(frozen=True)
class StepBound:
    """A row's bound and the figures behind it."""

    bound: Bound
    measured: bool  # from the GPU's traced work; False: inferred from MFU (records without a trace)
    step_ms: float
    gpu_busy_ms: float | None = None
    idle_fraction: float | None = None
    mfu: float | None = None
    power_w: float | None = None

    @property
    def host_bound(self) -> bool:
        return self.bound == HOST_BOUND

    def evidence(self) -> str:
        """The figures, as a clause: "GPU busy 3.1 ms of a 22.6 ms step (86% idle)", or, inferred,
        "2.8% MFU at 236 W in a 22.6 ms step"."""
        if self.measured and self.gpu_busy_ms is not None and self.idle_fraction is not None:
            return f"GPU busy {self.gpu_busy_ms:.3g} ms of a {self.step_ms:.3g} ms step ({self.idle_fraction:.0%} idle)"
        power = f" at {self.power_w:.0f} W" if self.power_w is not None else ""
        return f"{self.mfu:.1%} MFU{power} in a {self.step_ms:.3g} ms step"

    def words(self) -> str:
        """"host-bound (GPU busy 3.1 ms of a 22.6 ms step, 86% idle)"; inferred ones say so."""
        how = "" if self.measured else ", inferred from MFU"
        return f"{self.bound} ({self.evidence()}{how})"


def step_bound(
    step_ms: float | None,
    gpu_busy_ms: float | None,
    idle_fraction: float | None,
    *,
    mfu: float | None = None,
    matmul_share: float | None = None,
    power_w: float | None = None,
) -> StepBound | None:
    """The bound of a GPU step from what its records hold; None where they can't tell (a CPU, no
    trace and no MFU, or an MFU between the two marks)."""
    if step_ms is None:
        return None
    figures = {"step_ms": step_ms, "mfu": mfu, "power_w": power_w}
    if gpu_busy_ms is not None and idle_fraction is not None:
        bound = MIXED
        if idle_fraction >= HOST_BOUND_IDLE:
            bound = HOST_BOUND
        elif idle_fraction <= GPU_BOUND_IDLE:
            bound = GPU_BOUND
        return StepBound(bound, True, gpu_busy_ms=gpu_busy_ms, idle_fraction=idle_fraction, **figures)
    if mfu is None or matmul_share is None or matmul_share < MATMUL_HEAVY_SHARE:
        return None
    if mfu < LOW_MFU:
        return StepBound(HOST_BOUND, False, **figures)
    if mfu > HIGH_MFU:
        return StepBound(GPU_BOUND, False, **figures)
    return None


def host_bound_words(rows: Sequence[tuple[str, StepBound | None]]) -> str:
    """The host-bound clause of an answer: which modes were host-bound, every compared mode's bound
    with its figures, and what would change it. `rows`: (precision, its bound), the reference first."""
    host = [precision for precision, bound in rows if bound is not None and bound.host_bound]
    shown = "; ".join(f"{precision} {bound.words()}" for precision, bound in rows if bound is not None)
    return (
        f"{', '.join(host)} host-bound: kernel launches, not the GPU, set the pace ({shown})."
        f" What would change it: {REMEDIES}"
    )
