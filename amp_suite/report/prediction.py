"""Estimates held against what was published, and against what was measured: each published
speedup (report.references) beside the one the roofline estimate implies for the same GPU,
configurations and batches; each measured speedup beside the estimate for that GPU. No torch here.

Nothing is tuned to these figures: the estimate's inputs are the op profile, the datasheet and the
host's cost per kernel (fixed beforehand, measured on the host that ran, or given by the user; never
taken from the steps it is held against), and its error on them is reported as it comes out.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, Field, computed_field

from amp_suite.analysis.roofline import CellEstimate, speedup
from amp_suite.report.references import PublishedSpeedup, same_config


@dataclass(frozen=True)
class Calibration:
    published: PublishedSpeedup
    estimated: float | None  # the same ratio of estimated throughputs; None where the matrix lacks a side
    why: str = ""  # where there is no estimate: what the matrix lacks

    @property
    def error(self) -> float | None:
        """estimated / published - 1: +0.20 is 20% above the published speedup."""
        return None if self.estimated is None else self.estimated / self.published.value - 1


def calibrate(estimates: Sequence[CellEstimate], published: Sequence[PublishedSpeedup], gpu: str) -> list[Calibration]:
    """Each published speedup on `gpu` (as the peak table names it) beside the estimate's."""
    found = []
    for figure in published:
        if figure.gpu.casefold() not in gpu.casefold() and gpu.casefold() not in figure.gpu.casefold():
            continue
        mode = _side(estimates, figure.precision, figure.config)
        base = _side(estimates, figure.baseline, figure.baseline_config)
        if mode is None or base is None:
            missing = figure.precision if mode is None else figure.baseline
            found.append(Calibration(figure, None, f"the matrix has no {missing} cell in this configuration"))
        else:
            found.append(Calibration(figure, mode.samples_per_s / base.samples_per_s))
    return found


def mean_absolute_error(compared: Sequence[Calibration | Estimated]) -> float | None:
    """The mean size of the errors (|estimated / published or measured - 1|) of those that have one."""
    errors = [abs(c.error) for c in compared if c.error is not None]
    return statistics.fmean(errors) if errors else None


def _side(estimates: Sequence[CellEstimate], precision: str, wanted: dict) -> CellEstimate | None:
    return next(
        (e for e in estimates if e.precision == precision and e.batch == wanted.get("batch_size")
         and same_config(e.config, wanted)),
        None,
    )  # fmt: skip


HostSource = Literal["given", "measured", "assumed"]


@dataclass(frozen=True)
class HostFigure:
    """The host's cost per kernel an estimate of a run's records assumes, and where it comes from:
    given by the user (--launch-us), measured on the host that ran (the records' machine), or the
    peak table's assumption (records older than the measurement)."""

    launch_us: float
    source: HostSource
    set_aside: float | None = None  # the records' own measurement, where a given figure replaced it

    def words(self) -> str:
        figure = f"{self.launch_us:.3g} µs a kernel"
        if self.source == "given":
            own = (f"it wins over the records' own measurement, {self.set_aside:.3g} µs, a bare op's floor"
                   if self.set_aside is not None else "the records carry no measurement of their host")  # fmt: skip
            return f"{figure}, given with --launch-us ({own})"
        if self.source == "measured":
            return (f"{figure}, measured on the host that ran (a bare op's floor: a training step's kernels cost"
                    " it more; --launch-us sets another)")  # fmt: skip
        return (f"{figure}, assumed (the peak table's launch_us): the records carry no measurement of their"
                " host; --launch-us gives one")  # fmt: skip


def host_figure(given: float | None, measured: Sequence[float], assumed: float) -> HostFigure:
    """A figure the user gives wins: a record measures a bare op, the floor of what a step's kernels
    cost its host, and whoever gives a figure knows more (a step's own, e.g. a small model's step
    time over its kernels). Else the median of the records' measurements; else the assumption."""
    own = statistics.median(measured) if measured else None
    if given is not None:
        return HostFigure(given, "given", own)
    if own is not None:
        return HostFigure(own, "measured")
    return HostFigure(assumed, "assumed")


# What a row of prediction.json may hold, checked as the report reads it back (a file someone sent,
# or edited): a speedup or a host's cost is a positive, finite number, a time a finite one not below
# zero, and text is bounded. A row outside these (a measured speedup of 0: its error divides by it)
# is no estimate predict writes; the report leaves the file out and says which field (report.sources).
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Milliseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Words = Annotated[str, Field(max_length=300)]
MAX_DOMINANT = 20  # predict names the two slowest ops


class Estimated(BaseModel):
    """One mode of one cell on one GPU: its estimated speedup over the reference mode, and the
    speedup its records measured on that GPU, where there are records."""

    gpu: Words
    workload: Words  # the workload's label
    batch: int = Field(ge=1)
    precision: Words
    baseline: Words  # the mode the speedups divide by
    estimated: Positive
    step_ms: Milliseconds  # the mode's estimated step
    bound: Words  # host, compute or memory: host where launching its kernels takes longer than the GPU's work
    dominant: list[Words] = Field(max_length=MAX_DOMINANT)  # the ops that take the most of it, slowest first
    gpu_ms: Milliseconds | None = None  # the GPU's work in the estimated step (None in files older than it)
    host_ms: Milliseconds | None = None  # the host's launches in it: kernels x launch_us
    launch_us: Positive | None = None  # the host's cost per kernel the estimate assumed
    launch_source: HostSource | None = None  # where that figure comes from
    measured: Positive | None = None  # the records' speedup over the same baseline (their mean over seeds)
    measured_step_ms: Milliseconds | None = None  # the records' step (mean of the seeds' medians): beside step_ms

    @computed_field  # in report.json too
    @property
    def error(self) -> float | None:
        """estimated / measured - 1, where the GPU's records measured this speedup."""
        return None if self.measured is None else self.estimated / self.measured - 1


def estimated_speedups(
    cells: Sequence[CellEstimate], baseline: str, host: HostSource | None = None
) -> list[Estimated | None]:
    """For each of `cells`, in order, its speedup over its own cell's `baseline` (same label, config
    and batch); None for the baseline itself and where the baseline is not among `cells`. `host`:
    where the host's cost per kernel the estimates assumed comes from."""
    by_cell = {(e.label, json.dumps(e.config, sort_keys=True), e.batch, e.precision): e for e in cells}
    found: list[Estimated | None] = []
    for cell in cells:
        reference = by_cell.get((cell.label, json.dumps(cell.config, sort_keys=True), cell.batch, baseline))
        if reference is None or cell.precision == baseline:
            found.append(None)
            continue
        step = cell.step
        found.append(Estimated(
            gpu=step.gpu, workload=cell.label, batch=cell.batch, precision=cell.precision, baseline=baseline,
            estimated=speedup(step, reference.step), step_ms=step.seconds * 1e3, bound=step.bound,
            dominant=step.dominant_names(), gpu_ms=step.gpu_seconds * 1e3, host_ms=step.host_seconds * 1e3,
            launch_us=step.launch_us, launch_source=host,
        ))  # fmt: skip
    return found


class PredictionFile(BaseModel):
    """prediction.json in a run folder, written by `amp-suite predict --results`: the report shows it."""

    made_at: str
    estimated: list[Estimated]
