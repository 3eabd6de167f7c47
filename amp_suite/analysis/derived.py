"""The summary's derived quantities, each declared once, the way records/schema.py declares a
record's fields: what it is called, its unit and kind, how it is written, and which surfaces show it.

The terminal's table (cli.display), the report's tables (report.render: Markdown and HTML, from the
same cells) and each cell's MLflow run (tracking.cell_view, its diagnostics.json) loop over DERIVED
instead of picking fields by hand; report.json holds the row's field itself. A new quantity is its
field, computed in analysis.summary, and its declaration here: nothing else changes.

Quantities that need more than a value and its words stay with their surface: the status with its
numbered notes, parity in the verdict's colours (its words have one source too, analysis.words), the
step's bound with its evidence. No torch here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from amp_suite.analysis.quantities import Ratio
from amp_suite.analysis.summary import SummaryRow
from amp_suite.analysis.words import NOTHING, percent, ratio_words, times
from amp_suite.config.precisions import REFERENCE

Surface = Literal["terminal", "report", "mlflow"]
TERMINAL: Surface = "terminal"  # the summary table `run` and `summary` print
REPORT: Surface = "report"  # report.md and report.html (report.json holds every field of a row)
MLFLOW: Surface = "mlflow"  # each cell's run: its diagnostics.json, by the quantity's name
EVERYWHERE = frozenset({TERMINAL, REPORT, MLFLOW})

# The report's tables a quantity can be a column of: every row's, the batch search's, DDP's.
Table = Literal["results", "largest batch", "data parallel"]
RESULTS: Table = "results"
LARGEST_BATCH: Table = "largest batch"
DATA_PARALLEL: Table = "data parallel"

Kind = Literal["ratio", "figure", "share"]


@dataclass(frozen=True)
class Derived:
    """One derived quantity of a summary row."""

    name: str  # its SummaryRow field: report.json's key, and MLflow's in a cell's diagnostics.json
    header: str  # its column's title in the report (and the terminal's, unless `short` is given)
    kind: Kind  # a Ratio of two means (its interval, where seeds give one), a figure, or a share of a whole
    unit: str  # "x" for a ratio, "%" for a share, a figure's own ("MB", "J/sample")
    surfaces: frozenset[Surface]
    table: Table = RESULTS
    words: Callable[[SummaryRow], str] | None = None  # how every surface writes it; by its kind when None
    short: str | None = None  # the terminal's narrower title
    keep: int = 30  # the terminal: the narrower it is, the sooner a lower one is left out (cli.display.fit)
    only_where_measured: bool = False  # a column only where some row has it (a GPU's readings, say)

    def value(self, row: SummaryRow) -> Ratio | float | None:
        return getattr(row, self.name)

    def number(self, row: SummaryRow) -> float | None:
        """The value as one number (a ratio's middle): what MLflow stores."""
        value = self.value(row)
        return value.value if isinstance(value, Ratio) else value

    def written(self, row: SummaryRow) -> str:
        if self.words is not None:
            return self.words(row)
        value = self.value(row)
        if value is None:
            return NOTHING
        if self.kind == "ratio":
            return ratio_words(value) if isinstance(value, Ratio) else times(value)
        return percent(self.number(row)) if self.kind == "share" else f"{value:,.4g} {self.unit}"

    def title(self, surface: Surface) -> str:
        return self.short if surface == TERMINAL and self.short else self.header


def _peak_memory(row: SummaryRow) -> str:
    return NOTHING if row.peak_memory_mb is None else f"{row.peak_memory_mb:,.0f}"


def _middle(name: str) -> Callable[[SummaryRow], str]:
    """A ratio's value alone: where its interval would only repeat it (peak memory, a batch size,
    barely vary between seeds), report.json keeps the interval."""
    return lambda row: times(getattr(row, name) and getattr(row, name).value)


def _energy(row: SummaryRow) -> str:
    if row.energy_j_per_sample is None:
        return NOTHING
    power = f" ({row.power_w:,.0f} W)" if row.power_w is not None else ""
    return f"{row.energy_j_per_sample:.3g} J{power}"


def _underflow(row: SummaryRow) -> str:
    return NOTHING if row.grad_underflow_fraction is None else f"{row.grad_underflow_fraction:.1%}"


DERIVED: tuple[Derived, ...] = (
    Derived("peak_memory_mb", "peak MB", "figure", "MB", frozenset({TERMINAL}), words=_peak_memory, keep=30),
    Derived("memory_ratio", f"memory vs {REFERENCE}", "ratio", "x", EVERYWHERE, words=_middle("memory_ratio"),
            short=f"mem vs {REFERENCE}", keep=60),
    Derived("energy_j_per_sample", "energy / sample (power)", "figure", "J/sample", frozenset({REPORT}),
            words=_energy, only_where_measured=True),  # GPUs with NVML's energy counter
    Derived("gpu_work_ratio", f"GPU work vs {REFERENCE}", "ratio", "x", frozenset({TERMINAL}), keep=80,
            only_where_measured=True),  # the report's is beside the step's bound, its evidence
    Derived("grad_underflow_fraction", "grads < fp16", "share", "%", frozenset({TERMINAL}), words=_underflow,
            keep=10),
    Derived("batch_vs_fp32", f"vs {REFERENCE}", "ratio", "x", frozenset({REPORT, MLFLOW}), table=LARGEST_BATCH,
            words=_middle("batch_vs_fp32")),
    Derived("comm_share", "comm share", "share", "%", frozenset({REPORT, MLFLOW}), table=DATA_PARALLEL),
    Derived("scaling_efficiency", "scaling eff.", "share", "%", frozenset({REPORT, MLFLOW}), table=DATA_PARALLEL),
    Derived("hook_step_ratio", "hook step time", "ratio", "x", frozenset({REPORT, MLFLOW}), table=DATA_PARALLEL),
)  # fmt: skip


def shown(surface: Surface, rows: Sequence[SummaryRow], table: Table = RESULTS) -> list[Derived]:
    """The quantities `surface` shows for `rows` (the report's: of `table`), in declared order."""
    return [
        quantity
        for quantity in DERIVED
        if surface in quantity.surfaces
        and (surface != REPORT or quantity.table == table)
        and (not quantity.only_where_measured or any(quantity.value(row) is not None for row in rows))
    ]


def declared(name: str) -> Derived:
    """The declaration of the quantity in field `name`, for a surface that shows it on its own."""
    return next(quantity for quantity in DERIVED if quantity.name == name)
