"""The report's figures (matplotlib, PNG). Each is drawn from the report's rows or the records.

Sizes are bounded whatever the number of records: at most MAX_PANELS panels per figure and one
curve per (machine, workload, precision), taken from its lowest seed.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from amp_suite.analysis.quantities import Ratio
from amp_suite.analysis.summary import EAGER, SummaryRow, group_key, variant
from amp_suite.config import PRECISIONS
from amp_suite.config.base import DIVERGED, OK
from amp_suite.config.precisions import precision_order
from amp_suite.records.results import CellRecord
from amp_suite.report.build import Report
from amp_suite.text import printable

MAX_PANELS = 12
PALETTE = ("#4c72b0", "#55a868", "#dd8452", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
PRECISION_COLORS = dict(zip(PRECISIONS, PALETTE, strict=False))  # a mode keeps its colour in every figure


@dataclass(frozen=True)
class Figure:
    name: str  # file name under figures/
    title: str
    png: bytes


def draw_figures(report: Report, records: Sequence[CellRecord]) -> list[Figure]:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    labels = {m.id: m.label for m in report.machines}
    ids = {m.key: m.id for m in report.machines}
    drawn = [
        _draw("speedup.png", f"Speedup against {report.baseline}, by precision and machine", _speedup, report, labels),
        _draw("peak_memory.png", "Peak memory by precision and machine", _memory, report, labels),
        _draw("throughput.png", "Throughput against batch size", _throughput, report, labels),
        _draw("loss_curves.png", "Training loss per precision (measured steps)", _losses, records, ids, labels),
        _draw("loss_scale.png", "fp16 GradScaler loss scale per step", _loss_scales, records, ids, labels),
    ]
    return [figure for figure in drawn if figure is not None]


def _draw(name: str, title: str, painter: Callable[..., object], *args) -> Figure | None:
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    # Matplotlib's warnings (a glyph the font lacks, NaN in a bar) are about the drawing, not the
    # measurements: they stay off the terminal, where they would quote record strings raw.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure = painter(*args)
        if figure is None:
            return None
        figure.suptitle(title)
        for text in figure.findobj(Text):  # record strings: no control characters, no mathtext ("$")
            lines = text.get_text().split("\n")  # a title's own line breaks stay
            text.set_text("\n".join(printable(line) for line in lines).replace("$", r"\$"))
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")  # legends below a panel included
        plt.close(figure)
    return Figure(name, title, buffer.getvalue())


def _variant(text: str) -> str:
    """A variant as a suffix for titles and legends; nothing for the common case, eager."""
    return "" if text == EAGER else f" ({text})"


def _panels(count: int, width: float = 4.2, height: float = 3.2):
    import matplotlib.pyplot as plt

    columns = min(count, 3)
    rows = math.ceil(count / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows + 0.6), squeeze=False)
    for extra in axes.flat[count:]:
        extra.set_visible(False)
    return figure, list(axes.flat)


def _by_workload(rows: Sequence[SummaryRow]) -> dict[str, list[SummaryRow]]:
    groups: dict[str, list[SummaryRow]] = {}
    for row in rows:
        batch = "max" if row.max_batch else row.batch_size  # a search's rows share one panel
        where = f"{row.workload} / batch {batch}{_variant(row.variant)} ({row.matrix})"
        groups.setdefault(where, []).append(row)
    return dict(list(groups.items())[:MAX_PANELS])


def _grouped_bars(report: Report, labels: dict[str, str], value: Callable[[SummaryRow], float | None], ylabel: str,
                  ratio_to: str | None, value_format: str):  # fmt: skip
    """Bars per precision, grouped by machine, one panel per workload. `ratio_to`: the baseline
    precision of values that are ratios (left out of the bars, drawn as a line at 1, with intervals).
    A panel compares: two bars at least, or one ratio against its line; a lone bar (fp32's peak
    memory where no other mode ran) says nothing a table doesn't, and is left out."""
    groups = {where: [r for r in rows if value(r) is not None and r.precision != ratio_to] for where, rows in
              _by_workload(report.rows).items()}  # fmt: skip
    fewest = 1 if ratio_to else 2
    groups = {where: rows for where, rows in groups.items() if len(rows) >= fewest}
    if not groups:
        return None
    figure, axes = _panels(len(groups))
    for axis, (where, rows) in zip(axes, groups.items(), strict=False):
        machines = list(dict.fromkeys(r.machine for r in rows))
        precisions = sorted({r.precision for r in rows}, key=precision_order)  # the same order in every panel
        width = 0.8 / len(precisions)
        for i, precision in enumerate(precisions):
            labelled = False
            for j, machine in enumerate(machines):
                row = next((r for r in rows if r.machine == machine and r.precision == precision), None)
                if row is None:
                    continue
                height = value(row)
                error = _error(row.speedups.get(ratio_to), height) if ratio_to else None
                bars = axis.bar(j + i * width, height, width, color=PRECISION_COLORS.get(precision, "gray"),
                                yerr=error, capsize=3, label=None if labelled else precision)  # fmt: skip
                axis.bar_label(bars, fmt=value_format, fontsize=7, padding=2)  # the figure, not only its height
                labelled = True
        axis.set_xticks([j + width * (len(precisions) - 1) / 2 for j in range(len(machines))])
        axis.set_xticklabels([_short(labels[m]) for m in machines], fontsize=8)
        axis.set_title(where, fontsize=10)
        axis.set_ylabel(ylabel)
        if ratio_to:
            axis.axhline(1.0, color="black", linewidth=0.8)
        axis.margins(y=0.15)  # room for the value labels above the tallest bar
        _legend_below(axis, len(precisions))
    return figure


def _legend_below(axis, entries: int) -> None:
    """The legend under the panel, where it never covers a bar or a line."""
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(entries, 4), frameon=False)


def _error(ratio: Ratio | None, height: float):
    if ratio is None or ratio.interval is None:
        return None
    low, high = ratio.interval
    return [[max(height - low, 0)], [max(high - height, 0)]]


def _speedup(report: Report, labels: dict[str, str]):
    def speedup(row: SummaryRow) -> float | None:
        over = row.speedups.get(report.baseline)
        return over and over.value

    return _grouped_bars(report, labels, speedup, f"x vs {report.baseline}", report.baseline, "%.2fx")


def _memory(report: Report, labels: dict[str, str]):
    return _grouped_bars(report, labels, lambda r: r.peak_memory_mb, "peak MB", None, "%.0f")


def _throughput(report: Report, labels: dict[str, str]):
    """One panel per workload of a matrix that ran two or more batch sizes (one is a point, not a
    curve); a line per (machine, precision) across them."""
    measured = [r for r in report.rows if r.throughput]
    batches: dict[tuple[str, str], set[int | None]] = {}
    for row in measured:
        batches.setdefault((row.matrix, row.workload), set()).add(row.batch_size)
    panels = [panel for panel, sizes in batches.items() if len(sizes) > 1][:MAX_PANELS]
    if not panels:
        return None
    figure, axes = _panels(len(panels))
    for axis, (matrix, workload) in zip(axes, panels, strict=False):
        rows = [r for r in report.rows if (r.matrix, r.workload) == (matrix, workload) and r.throughput]
        for machine, precision, how in dict.fromkeys((r.machine, r.precision, r.variant) for r in rows):
            mine = [r for r in rows if (r.machine, r.precision, r.variant) == (machine, precision, how)]
            line = sorted((r.batch_size, r.throughput) for r in mine)
            axis.plot(
                [batch for batch, _ in line], [rate for _, rate in line], marker="o",
                linestyle="-" if how == EAGER else "--", color=PRECISION_COLORS.get(precision, "gray"),
                label=f"{precision}{_variant(how)}, {_short(labels[machine])}",
            )  # fmt: skip
        axis.set_title(f"{workload} ({matrix})", fontsize=10)
        axis.set_xlabel("batch size")
        axis.set_ylabel(rows[0].unit)
        _legend_below(axis, len(axis.lines))
    return figure


def _first_seeds(records: Sequence[CellRecord], has: Callable[[CellRecord], bool]) -> dict[tuple, CellRecord]:
    """One record per (machine, setup, precision): the lowest seed that has the curve."""
    chosen: dict[tuple, CellRecord] = {}
    for record in sorted(records, key=lambda r: r.seed):
        if has(record):
            chosen.setdefault(group_key(record), record)
    return chosen


def _curves(records, ids, labels, has, values, ylabel, group_by_precision: bool):
    chosen = _first_seeds(records, has)
    panels = list(dict.fromkeys(key[:2] for key in chosen))[:MAX_PANELS]  # (machine, setup)
    if not panels:
        return None
    figure, axes = _panels(len(panels))
    for axis, panel in zip(axes, panels, strict=False):
        shown = [record for key, record in chosen.items() if key[:2] == panel]
        for record in shown:
            color = PRECISION_COLORS.get(record.precision, "gray") if group_by_precision else None
            axis.plot(values(record), color=color, linewidth=1, label=f"{record.precision} (seed {record.seed})")
        first = shown[0]
        shown_variant = _variant(variant(first.compile, first.channels_last))
        batch = first.config.get("batch_size", first.batch_size)  # "auto" where searched
        where = f"{first.workload} / batch {batch}{shown_variant} ({first.matrix})"
        axis.set_title(f"{where}\n{_short(labels[ids[panel[0]]])}", fontsize=9)
        axis.set_xlabel("step")
        axis.set_ylabel(ylabel)
        _legend_below(axis, len(shown))
    return figure


def _losses(records: Sequence[CellRecord], ids: dict[str, str], labels: dict[str, str]):
    has = lambda r: bool(r.loss_curve) and r.status in (OK, DIVERGED)  # noqa: E731
    return _curves(records, ids, labels, has, lambda r: r.loss_curve, "training loss", True)


def _loss_scales(records: Sequence[CellRecord], ids: dict[str, str], labels: dict[str, str]):
    has = lambda r: bool(r.loss_scale_curve)  # noqa: E731
    figure = _curves(records, ids, labels, has, lambda r: r.loss_scale_curve, "loss scale", True)
    if figure is not None:
        for axis in figure.axes:
            if axis.get_visible() and axis.lines:
                axis.set_yscale("log", base=2)
    return figure


def _short(label: str, limit: int = 28) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"
