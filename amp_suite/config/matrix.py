"""The matrix: workloads x precisions x batch sizes x seeds, expanded into one CellSpec per cell."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, StringConstraints, model_serializer, model_validator

from amp_suite.config.base import (
    MAX_SEED,
    MAX_STEPS,
    NAME_MAX,
    NAME_PATTERN,
    BatchSize,
    CompileMode,
    ConfigError,
    Device,
    FrozenModel,
    Precision,
    Status,
    count,
)
from amp_suite.config.ddp import DdpCell
from amp_suite.config.precisions import PRECISIONS
from amp_suite.config.problems import MAX_SHOWN, not_among
from amp_suite.config.workloads import WORKLOADS, WorkloadConfig

# How a parity verdict is reached (amp_suite.analysis.summary.parity):
#   t-test: a one-sided paired t test of non-inferiority over the seeds both sides ran, at the margin
#     tolerance x |fp32 mean| and level alpha;
#   noise-floor: the rule before it, kept to read older records by: AMP's mean no worse than fp32's
#     by more than max(tolerance x |fp32 mean|, k x fp32's seed-to-seed std).
PARITY_METHODS = ("t-test", "noise-floor")
LEGACY_PARITY_METHOD = "noise-floor"  # what a rule written without a method was


class ParityConfig(FrozenModel):
    """AMP passes when a one-sided paired t test over the seeds both sides ran shows it worse than
    fp32 by less than the margin (tolerance x |fp32 mean|) at level alpha."""

    method: Literal[PARITY_METHODS] = "t-test"  # type: ignore[valid-type]
    tolerance: float = Field(0.02, ge=0, description="the margin, relative to fp32's value")
    alpha: float = Field(0.05, gt=0, lt=0.5, description="t-test: the one-sided test's level")
    k: float = Field(2.0, ge=0, description="noise-floor: multiples of fp32's seed-to-seed std")

    @model_validator(mode="before")
    @classmethod
    def _older_rules(cls, data: object) -> object:
        """A rule written before rules named their method is the noise-floor rule it was then."""
        if isinstance(data, dict) and "method" not in data and "k" in data and "alpha" not in data:
            return {**data, "method": LEGACY_PARITY_METHOD}
        return data


MAX_BUDGET_FACTOR = 20  # analysis.sequential plans its looks up to 20x the fixed schedule's rounds
# The default budget: 12x the schedule's rounds (72 of 6 windows; analysis.sequential's simulation of
# busy runs finds a 1.10x gain in 86% of them by then, 31% by 18), and at most 120 s of a comparison's
# turns, so that a busy box runs the default GPU matrix's timing at most a few times longer.
DEFAULT_BUDGET, DEFAULT_BUDGET_S = 12, 120.0


class StoppingConfig(FrozenModel):
    """How long a side-by-side comparison is timed. `sequential` (the default): after the fixed
    schedule's windows, round after round until every mode's speed verdict is decided, by a stopping
    rule whose error holds however often it looks (analysis.sequential), or the budget ends. `fixed`:
    the schedule alone, step for step (reproducing a published configuration). Either way accuracy is
    judged at the matrix's `steps`: the rounds after them only time. Cells that run alone keep the
    fixed schedule."""

    rule: Literal["sequential", "fixed"] = "sequential"
    budget: int = Field(
        DEFAULT_BUDGET, ge=1, le=MAX_BUDGET_FACTOR,
        description="the most rounds of turns, as a multiple of the fixed schedule's windows (12: twelve times)",
    )  # fmt: skip
    budget_s: float | None = Field(
        DEFAULT_BUDGET_S, gt=0, le=86_400,
        description="and at most this many seconds of a comparison's turns (null: rounds alone)",
    )  # fmt: skip

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: object) -> object:
        """`stopping: fixed` (or `sequential`) for the rule alone."""
        return {"rule": data} if isinstance(data, str) else data


class Expectation(FrozenModel):
    """An outcome the matrix is built to produce, e.g. a negative control that must fail parity.
    Cells it covers are judged by it instead of by the default (ok or skipped, parity not failed)."""

    precision: Precision
    workload: str | None = Field(None, description="a workload's name; every workload when omitted")
    parity: Literal["pass", "fail"] | None = None
    status: Status | None = None

    @model_validator(mode="after")
    def _says_something(self):
        if self.parity is None and self.status is None:
            raise ValueError("an expectation needs parity (pass/fail) or status")
        return self

    def covers(self, workload: str, precision: str) -> bool:
        return precision == self.precision and self.workload in (None, workload)


class CellSpec(FrozenModel):
    """Everything one cell needs; the same object goes to the worker process and into the record."""

    matrix: str
    workload: WorkloadConfig
    precision: Precision
    batch_size: BatchSize
    seed: int = count(MAX_SEED, lower=0)
    steps: int = count(MAX_STEPS)
    warmup_steps: int = count(MAX_STEPS)
    max_grad_norm: PositiveFloat
    device: Device
    compile: CompileMode = "off"
    channels_last: bool = False
    force: bool = False
    ddp: DdpCell | None = Field(None, description="world size and comm hook of a data-parallel cell")
    machine: str | None = Field(
        None, pattern=NAME_PATTERN, max_length=NAME_MAX, description="the GPU type a Ray fleet must run it on"
    )
    stopping: StoppingConfig = StoppingConfig(rule="fixed")

    @model_serializer(mode="wrap")
    def _without_unset_axes(self, handler):
        """A cell that is neither data-parallel nor bound to a GPU type has no `ddp` or `machine`
        key, and one timed on the fixed schedule no `stopping` key: its config_hash is what it
        always was (records before sequential timing were timed so)."""
        data = handler(self)
        if isinstance(data, dict):
            for axis in ("ddp", "machine"):
                if getattr(self, axis) is None:
                    data.pop(axis, None)
            if self.stopping.rule == "fixed":
                data.pop("stopping", None)
        return data

    @property
    def cell_id(self) -> str:
        """workload/batch/seed/precision, then the compile mode, memory layout and DDP axes where not the default."""
        axes = ([] if self.compile == "off" else [f"compile-{self.compile}"]) + (["nhwc"] if self.channels_last else [])
        axes += [self.ddp.suffix] if self.ddp is not None else []
        axes += [f"on-{self.machine}"] if self.machine else []
        return "/".join([f"{self.workload.name}/bs{self.batch_size}/seed{self.seed}/{self.precision}", *axes])

    @property
    def gpus(self) -> int:
        """Devices the cell occupies at once: its world size when data-parallel, else one."""
        return self.ddp.world_size if self.ddp is not None else 1

    @property
    def config_hash(self) -> str:
        """Identifies the resolved configuration, so --resume never reuses a stale record."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:12]


class Matrix(FrozenModel):
    name: str = Field(pattern=NAME_PATTERN, max_length=NAME_MAX)
    description: str = Field("", max_length=4096)
    seed: int = count(MAX_SEED - 100, lower=0, default=0)
    repeats: int = count(100, default=1)
    warmup_steps: int = count(MAX_STEPS, default=5)
    steps: int = count(MAX_STEPS)
    max_grad_norm: PositiveFloat = 1.0
    parity: ParityConfig = ParityConfig()
    precisions: list[Precision] = Field(min_length=1)
    compile: list[CompileMode] = Field(["off"], min_length=1, description="torch.compile modes; 'off' is eager")
    channels_last: list[bool] = Field(
        [False], min_length=1, description="memory layouts to run image workloads in; others keep theirs"
    )
    workloads: list[WorkloadConfig] = Field(min_length=1, max_length=64)
    expect: list[Expectation] = Field(default_factory=list, max_length=256)
    machines: list[Annotated[str, StringConstraints(pattern=NAME_PATTERN, max_length=NAME_MAX)]] = Field(
        default_factory=list,
        max_length=64,
        description="GPU types, as Ray names them (A100, H100): with --ray the matrix runs once on each",
    )
    stopping: StoppingConfig = Field(StoppingConfig(), description="how long a side-by-side comparison is timed")
    side_by_side: bool = Field(
        True,
        description="the precisions of a comparison take turns on the device, window by window of their timed"
        " steps, so that a machine that changes speed changes it for all of them (docs/parity.md: side by side)",
    )

    @model_validator(mode="after")
    def _unique_names(self):
        names = [w.name for w in self.workloads]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"workload names must be unique; give each a distinct 'label': {duplicated}")
        for axis in ("precisions", "compile", "channels_last", "machines"):
            values = getattr(self, axis)
            if len(set(values)) != len(values):
                raise ValueError(f"{axis} must not repeat: {values}")
        for expectation in self.expect:
            if expectation.workload is not None and expectation.workload not in names:
                raise ValueError(f"expect: no workload named {expectation.workload!r}; this matrix has {names}")
            if expectation.precision not in self.precisions:
                raise ValueError(f"expect: precision {expectation.precision!r} is not in precisions")
        return self

    @model_validator(mode="after")
    def _benchmarks_compare_their_modes(self):
        """A kernel benchmark compares the modes it was published in: every precision of its matrix is one."""
        for workload in (w for w in self.workloads if w.kernel_benchmark):
            others = [p for p in self.precisions if p not in workload.precisions]
            if others:
                raise ValueError(
                    f"workload {workload.workload} compares {', '.join(workload.precisions)}, not {', '.join(others)}:"
                    " give it a matrix of its own with those precisions"
                )
        return self

    def select(self, workloads: list[str] | None, precisions: list[str] | None) -> Matrix:
        """The same matrix restricted to the named workloads and precisions (CLI filters)."""
        kept = self.workloads
        if workloads is not None:
            _check_choices("--workloads", workloads, [w.name for w in self.workloads], "workload", WORKLOADS)
            kept = [w for w in self.workloads if w.name in workloads]
        modes = self.precisions
        if precisions is not None:
            _check_choices("--precisions", precisions, list(self.precisions), "precision mode", PRECISIONS)
            modes = [p for p in self.precisions if p in precisions]
        names = {w.name for w in kept}
        expect = [e for e in self.expect if e.precision in modes and e.workload in (None, *names)]
        return self.model_copy(update={"workloads": kept, "precisions": modes, "expect": expect})

    def cells(self, device: Device, force: bool = False) -> list[CellSpec]:
        """Every precision of one comparison back to back, in the matrix's order for the first seed
        and in the reverse order for the next: cells that run one after another then balance a
        machine's drift over pairs of seeds (side by side, the order of their turns does so too)."""
        seeds = [self.seed + r for r in range(self.repeats)]
        return [
            CellSpec(
                matrix=self.name,
                workload=w,
                precision=p,
                batch_size=bs,
                seed=seed,
                steps=self.steps,
                warmup_steps=self.warmup_steps,
                max_grad_norm=self.max_grad_norm,
                device=device,
                compile=mode,
                channels_last=layout,
                force=force or p in w.force,
                ddp=ddp,
                machine=machine,
                stopping=self.stopping,
            )
            for machine in self.machines or [None]  # a Ray fleet runs the whole matrix on each type
            for w in self.workloads
            for bs in w.batch_sizes
            for index, seed in enumerate(seeds)
            for mode in w.compile or self.compile  # a workload's own list wins over the matrix's
            for layout in w.layouts(self.channels_last)
            for ddp in w.ddp_cells()
            for p in (self.precisions if index % 2 == 0 else self.precisions[::-1])
        ]


def _check_choices(option: str, given: list[str], valid: list[str], kind: str, known: tuple[str, ...]) -> None:
    """Each name given is one the matrix runs; else why not, name by name: a name the registry
    `known` lists is one this matrix leaves out, any other gets its nearest names."""
    if not given:
        raise ConfigError(f"{option}: empty; this matrix has {valid}")
    reasons = [not_among(name, kind, valid, known) for name in given if name not in valid]
    if reasons:
        more = f"; and {len(reasons) - MAX_SHOWN} more" if len(reasons) > MAX_SHOWN else ""
        raise ConfigError(f"{option}: {'; '.join(reasons[:MAX_SHOWN])}{more} (this matrix runs {', '.join(valid)})")
    if len(set(given)) != len(given):
        raise ConfigError(f"{option}: names repeat; this matrix has {valid}")
