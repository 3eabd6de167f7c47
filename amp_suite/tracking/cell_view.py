"""What a cell's run shows in MLflow: a few charted metrics, its verdict line, the rest in one file.

MLflow charts every metric key an experiment holds and offers each as a column: 39 measured
fields, every extra validation metric and each verdict's details made 46 charts in alphabetical
order and 136 columns. A run charts what people compare between cells (CHARTED: throughput in its
unit, speedup over fp32, peak memory, the validation metric under its own name, time to target,
and the training loss as the one curve), and keeps every other reading in `diagnostics.json`, one
artifact beside record.json: out of the charts and the column picker, one click away in the
run's artifacts, and the same file whether `run` or `sync` wrote it. A metric prefix would not do
that: MLflow still charts and lists a prefixed key. No mlflow import here: plain values.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from amp_suite.analysis.summary import SummaryRow, natural_throughput
from amp_suite.analysis.time_to_target import crossing
from amp_suite.analysis.words import parity_words, ratio_words, target_words, times
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
    """The summary's details for this cell: other baselines, memory, parity, the target's reach."""
    found: dict[str, Any] = {f"speedup_vs_{b}": r.value for b, r in row.speedups.items() if b != REFERENCE}
    found["memory_ratio"] = row.memory_ratio
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
    if record.status != "ok":
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


def _memory(peak_mb: float | None, ratio: float | None) -> str:
    if peak_mb is None:
        return "peak memory not measured"
    of_reference = f" ({times(ratio)} {REFERENCE}'s)" if ratio is not None else ""
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
