"""What a cell's run shows in MLflow: a few charted metrics, its verdict line, the rest in one file.

MLflow charts every metric key an experiment holds and offers each as a column: 39 measured
fields, every extra validation metric and each verdict's details made 46 charts in alphabetical
order and 136 columns. A run charts what people compare between cells (CHARTED: throughput in its
unit, speedup over fp32, peak memory, the validation metric under its own name, time to target,
and the training loss as the one curve), and keeps every other reading in `diagnostics.json`, one
artifact beside record.json: out of the charts and the column picker, one click away in the
run's artifacts, and the same file whether `run` or `sync` wrote it. A metric prefix would not do
that: MLflow still charts and lists a prefixed key. No mlflow import here: plain values.

The experiment's runs table opens in a saved view (runs_view) that shows those cells side by side:
a group per precision of each comparison (and machine, where several meet), so no group's table
row or chart bar averages two precisions together, with the verdict's columns in sight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from amp_suite.analysis.derived import MLFLOW, shown
from amp_suite.analysis.quantities import Ratio
from amp_suite.analysis.summary import SummaryRow, natural_throughput
from amp_suite.analysis.time_to_target import crossing
from amp_suite.analysis.words import parity_words, ratio_words, target_words, times
from amp_suite.config.base import OK
from amp_suite.config.precisions import REFERENCE
from amp_suite.records.results import CellRecord
from amp_suite.records.schema import fields_of

MEASURED = fields_of(CellRecord, role="measured")  # every quantity a cell measured, as declared
DIAGNOSTICS = "diagnostics.json"
SPEEDUP = "speedup"  # throughput over fp32's, from the summary
GPU_WORK = "gpu_work_vs_fp32"  # fp32's GPU busy time per step over this mode's, from the summary (GPU cells)
PEAK_MEMORY = "peak_memory_mb"
TIME_TO_TARGET = "time_to_target_s"
TRAIN_LOSS = "train_loss"  # the one curve: a metric's history, per step
CHARTED_FIELDS = (PEAK_MEMORY, TIME_TO_TARGET)  # measured fields charted under their own names
# Points of a per-step curve logged as a metric's history. A store takes ~10,000 rows a second,
# so a 1,000,000-step cell's curves took minutes to log; the UI's charts draw a sample of a few
# hundred points anyway. Every point stays in the run's record.json and in results.jsonl.
MAX_CHARTED_POINTS = 10_000

Metric = tuple[str, float, int]  # key, value, step

# Tags a cell's run carries for the view: what it is compared within, and the summary's verdicts.
COMPARISON = "comparison"  # the cell's setup without seed and precision: "mlp · bs64 · compile-default"
MODE = "mode"  # one mode of that comparison, precision first: "bf16 · mlp · bs64 · compile-default"
MACHINE = "machine"
PARITY = "parity"
PRECISION = "precision"  # the cell's param (cell_params)
# MLflow's run description, as a column of its runs table (attributes.Description in its UI bundle).
DESCRIPTION_COLUMN = "attributes.`Description`"
RUN_NAME_COLUMN = "attributes.`Run Name`"
METRIC_WIDTH = 170  # pixels: throughput_samples_per_s in full


def throughput_metric(unit: str) -> str:
    """images/s -> throughput_images_per_s."""
    return "throughput_" + unit.replace("/", "_per_")


def val_metric_key(record: CellRecord) -> str:
    """The validation metric under the workload's own name (val_accuracy, val_perplexity)."""
    return record.val_metric_name or "val_metric"


def charted_names(record: CellRecord) -> set[str]:
    """Every metric key a cell's run may carry: its charts and its columns."""
    throughput = throughput_metric(natural_throughput(record)[1])
    return {throughput, SPEEDUP, GPU_WORK, *CHARTED_FIELDS, val_metric_key(record), TRAIN_LOSS}


def record_metrics(record: CellRecord) -> list[Metric]:
    """The charted metrics a record holds itself (the speedup comes with the summary)."""
    throughput, unit = natural_throughput(record)
    values = {throughput_metric(unit): throughput, val_metric_key(record): record.val_metric}
    values |= {key: getattr(record, key) for key in CHARTED_FIELDS}
    metrics = [(key, value, 0) for key, value in values.items() if value is not None]  # NaN too: a diverged cell
    return metrics + [(TRAIN_LOSS, loss, record.warmup_steps + i) for i, loss in _charted(record.loss_curve)]


def record_diagnostics(record: CellRecord) -> dict[str, Any]:
    """Every other reading of the cell, by field name, unit-suffixed as the record names them."""
    charted = charted_names(record) | {"throughput", "val_metric"}
    found = {key: getattr(record, key) for key in MEASURED if key not in charted}
    found |= {key: value for key, value in record.val_metrics.items() if key not in charted}
    return {key: value for key, value in found.items() if value is not None}


def verdict_metrics(record: CellRecord, row: SummaryRow) -> list[Metric]:
    """The charted verdicts: the speedup over fp32, and the run's own time to a target derived
    from fp32's runs (known only now, so the cell could not log it when it ended)."""
    reference = row.speedups.get(REFERENCE)
    metrics = [(SPEEDUP, reference.value, 0)] if reference is not None else []
    if row.gpu_work_ratio is not None:  # the speedup a host that keeps the GPU fed would see
        metrics.append((GPU_WORK, row.gpu_work_ratio.value, 0))
    if (reach := row.time_to_target) is not None and record.target is None:
        if (point := crossing(record, reach.target)) is not None:
            metrics.append((TIME_TO_TARGET, point.train_s, 0))
    return [m for m in metrics if _finite(m[1])]


def verdict_diagnostics(record: CellRecord, row: SummaryRow) -> dict[str, Any]:
    """The summary's details for this cell: other baselines, the derived quantities MLflow shows
    (analysis.derived), parity, the target's reach."""
    found: dict[str, Any] = {f"speedup_vs_{b}": r.value for b, r in row.speedups.items() if b != REFERENCE}
    found |= {quantity.name: quantity.number(row) for quantity in shown(MLFLOW, [row])}
    if (p := row.parity) is not None:
        found |= {"parity_delta": p.delta, "parity_margin": p.tolerance, "parity_p_value": p.p_value,
                  "parity_seeds": p.seeds}  # fmt: skip
    if (reach := row.time_to_target) is not None:
        found |= {"target_speedup": reach.speedup, "target_reached_seeds": reach.reached}
        if record.target is None and (point := crossing(record, reach.target)) is not None:
            found["steps_to_target"] = point.step
    return {key: value for key, value in found.items() if value is not None}


def verdict_line(record: CellRecord, row: SummaryRow | None) -> str:
    """The run's description, one line: "bf16 · speedup vs fp32 1.52x [1.40, 1.65] · parity pass
    (...) · peak memory 812 MB (0.71x fp32's)"; a cell that did not finish says how it ended."""
    if record.status != OK:
        return f"{record.precision} · {record.status}: {record.reason or 'no reason recorded'}"
    if row is None:  # logged before the summary: what the record alone says
        return f"{record.precision} · {_memory(record.peak_memory_mb, None)}"
    if record.precision == REFERENCE:
        return f"{REFERENCE} · the reference every mode is compared with · {_memory(row.peak_memory_mb, None)}"
    parts = [record.precision, f"speedup vs {REFERENCE} {ratio_words(row.speedup)}"]
    parts += [f"parity {parity_words(row.parity)}", _memory(row.peak_memory_mb, row.memory_ratio)]
    if row.time_to_target is not None:
        parts.append(f"speedup to target {target_words(row.time_to_target)}")
    if row.bound is not None:
        parts.append(row.bound.words())
    return " · ".join(parts)


def _memory(peak_mb: float | None, ratio: Ratio | None) -> str:
    if peak_mb is None:
        return "peak memory not measured"
    of_reference = f" ({times(ratio.value)} {REFERENCE}'s)" if ratio is not None else ""
    return f"peak memory {peak_mb:,.0f} MB{of_reference}"


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _charted(curve: Sequence[float]) -> Iterator[tuple[int, float]]:
    """(step, value) of MAX_CHARTED_POINTS of the curve at most, evenly strided, and its last point."""
    stride = max(1, -(-len(curve) // MAX_CHARTED_POINTS))  # ceiling: a curve within the bound is logged whole
    steps = range(0, len(curve), stride)
    if steps and steps[-1] != len(curve) - 1:
        steps = [*steps, len(curve) - 1]
    return ((step, curve[step]) for step in steps)


# -- the runs table's saved view -------------------------------------------------------------
# What MLflow 3.x's UI takes from a shared view (mlflow/server/js/src/experiment-tracking/components/
# experiment-page: hooks/useSharedExperimentViewState.ts, models/ExperimentPageUIState.ts; checked
# against 3.17's built bundle): selectedColumns, columnOrder, columnWidths,
# runsHiddenMode, compareRunCharts, compareRunSections, viewMaximized, runListHidden,
# isAccordionReordered, groupBy, groupsExpanded, useGroupedValuesInCharts, hideEmptyCharts,
# globalLineChartConfig, chartsSearchFilter (runsExpanded, runsPinned, runsHidden and
# runsVisibilityMap it drops), and the search facets searchFilter, orderByKey, orderByAsc, startTime,
# lifecycleFilter, modelVersionFilter and datasetsFilter. A grouped table shows each group's
# aggregate in its own row and charts the groups, not their runs: that is why the groups split
# precisions. Within a group only a comparison's seeds meet, whose charted speedup is one value.
AGGREGATE = "average"  # over a comparison's seeds of one precision: each carries the summary's speedup


def column(kind: str, key: str) -> str:
    """A runs-table column as MLflow's UI names it: params.`precision` (its makeCanonicalSortKey)."""
    return f"{kind}.`{key}`"


def view_columns(metric_keys: Iterable[str]) -> list[str]:
    """The verdict's columns: the cell's line, its precision, the speedup over fp32 with its
    interval, throughput in each unit the experiment holds, peak memory and parity."""
    throughputs = sorted(key for key in metric_keys if key.startswith(throughput_metric("")))
    metrics = [column("metrics", key) for key in [*throughputs, PEAK_MEMORY]]
    return [DESCRIPTION_COLUMN, column("params", PRECISION), column("tags", SPEEDUP), *metrics,
            column("tags", PARITY)]  # fmt: skip


def column_widths(columns: Sequence[str]) -> dict[str, int]:
    """Room for a group's name ("fp16 · mlp · bs64") and a speedup with its interval, which MLflow
    cuts at about 100 pixels, and for a metric's name (its value has a dozen digits past the point)."""
    metrics = {key: METRIC_WIDTH for key in columns if key.startswith("metrics.")}
    return {RUN_NAME_COLUMN: 260, column("tags", SPEEDUP): 150} | metrics


def group_keys(several_machines: bool) -> list[dict[str, str]]:
    """What the table groups by: one mode of one comparison (a group is its seeds), and the machine
    where there are several (the summary never pools them). One tag, not comparison and precision
    as two keys: MLflow labels a group "key: value, key: value" in a narrow column, and cut
    after the comparison the label would hide the precision; its label is the tag's value alone."""
    keys = [{"mode": "tag", "groupByData": MODE}]
    return keys + ([{"mode": "tag", "groupByData": MACHINE}] if several_machines else [])


def runs_view(metric_keys: Iterable[str] = (), several_machines: bool = False) -> dict[str, Any]:
    """The shared view state: every group open and charted, a comparison's modes next to each
    other, and the runs without a group (each invocation's parent, its answer in the Description
    column) open too, where MLflow folds them."""
    keys = group_keys(several_machines)
    ungrouped = ",".join(f"{key['mode']}.{key['groupByData']}" for key in keys)  # MLflow's id for that group
    columns = view_columns(metric_keys)
    return {
        "runsHiddenMode": "SHOW_ALL",  # MLflow charts the first 10 otherwise
        "selectedColumns": columns,
        # Its own order is by kind (metrics, params, tags): the verdict's columns next to the name instead.
        # MLflow applies widths only with an order; columns left out of it (Created, Duration) follow.
        "columnOrder": [RUN_NAME_COLUMN, *columns[1:], DESCRIPTION_COLUMN],
        "columnWidths": column_widths(columns),
        "groupBy": {"aggregateFunction": AGGREGATE, "groupByKeys": keys},
        "groupsExpanded": {ungrouped: True},
        "useGroupedValuesInCharts": True,
        "orderByKey": column("tags", COMPARISON),  # groups come in the order of their runs
        "orderByAsc": True,
    }


def view_tags(cell_id: str) -> dict[str, str]:
    """The tags the saved view groups and orders a cell's run by."""
    precision = cell_id.split("/")[3] if cell_id.count("/") >= 3 else ""
    comparison = comparison_name(cell_id)
    return {COMPARISON: comparison, MODE: f"{precision} · {comparison}" if precision else comparison}


def comparison_name(cell_id: str) -> str:
    """What a cell is compared within, as its run name says it without precision and seed:
    "mlp/bs64/seed0/bf16/compile-default" -> "mlp · bs64 · compile-default"."""
    parts = cell_id.split("/")
    if len(parts) < 4:
        return cell_id
    workload, batch, _seed, _precision, *axes = parts
    return " · ".join([workload, batch, *axes])
