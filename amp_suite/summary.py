"""Speedup, memory and validation-parity tables, recomputed from the records alone. No torch here.

Rows group the records of one (workload, batch size, precision) over seeds; speedup, memory
ratio and parity compare each group with fp32 of the same workload and batch size.

Parity rule (see ParityConfig): AMP passes when its mean primary validation metric is no worse
than fp32's by more than max(tolerance x |fp32 mean|, k x fp32's seed-to-seed stdev). With one
fp32 seed there is no noise estimate, so the verdict is "indicative" (delta and tolerance are
still reported). Only degradation counts: an AMP run that validates better is not a failure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from amp_suite.config import ParityConfig
from amp_suite.results import CellRecord

BASELINE = "fp32"


@dataclass(frozen=True)
class Parity:
    delta: float  # AMP mean minus fp32 mean, in the metric's units
    tolerance: float  # the largest degradation that still passes
    verdict: str  # "pass", "fail" or "indicative"


def parity(amp: Sequence[float], fp32: Sequence[float], higher_is_better: bool, rule: ParityConfig) -> Parity | None:
    if not amp or not fp32:
        return None
    delta = statistics.fmean(amp) - statistics.fmean(fp32)
    degradation = -delta if higher_is_better else delta
    tolerance = rule.tolerance * abs(statistics.fmean(fp32))
    if not math.isfinite(degradation):  # a NaN or inf metric fails, even with one seed
        return Parity(delta, tolerance, "fail")
    if len(fp32) < 2:
        return Parity(delta, tolerance, "indicative")
    tolerance = max(tolerance, rule.k * statistics.stdev(fp32))
    return Parity(delta, tolerance, "pass" if degradation <= tolerance else "fail")


@dataclass(frozen=True)
class SummaryRow:
    workload: str
    batch_size: int
    precision: str
    status: str  # "ok" when every seed ran; otherwise the worst status seen
    reason: str | None
    runs: int  # seeds that finished ok
    throughput: float | None
    peak_memory_mb: float | None
    speedup: float | None  # throughput / fp32 throughput
    memory_ratio: float | None  # peak memory / fp32 peak memory
    val_metric_name: str | None = None
    val_metric: float | None = None  # mean over seeds that finished ok
    grad_underflow_fraction: float | None = None  # fp32 gradients below fp16's range, before training
    parity: Parity | None = None  # None for fp32 itself and where a side has no result

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def summarize(records: Iterable[CellRecord], rule: ParityConfig | None = None) -> list[SummaryRow]:
    rule = rule or ParityConfig()
    groups: dict[tuple[str, int, str], list[CellRecord]] = {}
    for record in records:
        groups.setdefault((record.workload, record.batch_size, record.precision), []).append(record)

    means = {key: _means(group) for key, group in groups.items()}
    rows = []
    for (workload, batch_size, precision), group in groups.items():
        throughput, memory = means[(workload, batch_size, precision)]
        baseline = groups.get((workload, batch_size, BASELINE))
        base_throughput, base_memory = means.get((workload, batch_size, BASELINE), (None, None))
        rows.append(
            SummaryRow(
                workload=workload,
                batch_size=batch_size,
                precision=precision,
                status=_status(group),
                reason=next((r.reason for r in group if r.reason), None),
                runs=sum(r.status == "ok" for r in group),
                throughput=throughput,
                peak_memory_mb=memory,
                speedup=_ratio(throughput, base_throughput),
                memory_ratio=_ratio(memory, base_memory),
                val_metric_name=next((r.val_metric_name for r in group if r.val_metric_name), None),
                val_metric=_mean([r.val_metric for r in group if r.status == "ok"]),
                grad_underflow_fraction=_mean([r.grad_underflow_fraction for r in group if r.status == "ok"]),
                parity=None if precision == BASELINE else _parity(group, baseline, rule),
            )
        )
    return rows


def _parity(group: list[CellRecord], baseline: list[CellRecord] | None, rule: ParityConfig) -> Parity | None:
    """Compare on the seeds both sides finished, so a failed seed can't bias either mean."""
    amp = {r.seed: r.val_metric for r in group if r.status == "ok" and r.val_metric is not None}
    amp |= {r.seed: math.nan for r in group if r.status == "diverged"}  # a diverged run fails parity
    fp32 = {r.seed: r.val_metric for r in baseline or () if r.status == "ok" and r.val_metric is not None}
    seeds = sorted(amp.keys() & fp32.keys())
    higher_is_better = next((r.val_higher_is_better for r in group if r.val_higher_is_better is not None), True)
    return parity([amp[s] for s in seeds], [fp32[s] for s in seeds], higher_is_better, rule)


def _means(group: list[CellRecord]) -> tuple[float | None, float | None]:
    ok = [r for r in group if r.status == "ok"]
    return _mean([r.throughput for r in ok]), _mean([r.peak_memory_mb for r in ok])


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _status(group: list[CellRecord]) -> str:
    statuses = {r.status for r in group}
    for status in ("failed", "diverged", "skipped"):
        if status in statuses:
            return status
    return "ok"


def _ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return value / baseline
