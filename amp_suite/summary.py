"""Speedup and memory tables, recomputed from the records alone. No torch here.

Rows group the records of one (workload, batch size, precision) over seeds; speedup and memory
ratio compare each group with fp32 of the same workload and batch size.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from amp_suite.results import CellRecord

BASELINE = "fp32"


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

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def summarize(records: Iterable[CellRecord]) -> list[SummaryRow]:
    groups: dict[tuple[str, int, str], list[CellRecord]] = {}
    for record in records:
        groups.setdefault((record.workload, record.batch_size, record.precision), []).append(record)

    means = {key: _means(group) for key, group in groups.items()}
    rows = []
    for (workload, batch_size, precision), group in groups.items():
        throughput, memory = means[(workload, batch_size, precision)]
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
            )
        )
    return rows


def _means(group: list[CellRecord]) -> tuple[float | None, float | None]:
    ok = [r for r in group if r.status == "ok"]
    throughputs = [r.throughput for r in ok if r.throughput is not None]
    memories = [r.peak_memory_mb for r in ok if r.peak_memory_mb is not None]
    return (
        statistics.fmean(throughputs) if throughputs else None,
        statistics.fmean(memories) if memories else None,
    )


def _status(group: list[CellRecord]) -> str:
    statuses = {r.status for r in group}
    for status in ("failed", "skipped"):
        if status in statuses:
            return status
    return "ok"


def _ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return value / baseline
