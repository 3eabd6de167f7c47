"""A speedup and its 95% interval, from what varies within a run and between seeds. No torch here.

Each seed gives one contrast: the throughput of a mode over its baseline's, on the log scale (a
ratio's interval must stay above 0, and a halving weighs as much as a doubling), with a standard
error from the windows its timed steps were measured in (config.base.window_edges):

- side by side (both records of one `side_by_side_id`, as many windows each): window i of one cell
  ran next to window i of the other. The log ratios of these pairs vary with whatever changed
  within a pair, and with nothing that changed between pairs: the error is their spread over
  sqrt(windows), with windows - 1 degrees of freedom.
- one after another: each cell's windows give its own spread, and the error combines both
  (Welch). What changed between the two cells is in neither; a cell whose windows varied beyond
  NOISY_SPREAD can't carry a recommendation (analysis.answer).

Over seeds (and runs repeated on one machine, each pair a contrast of its own), the log speedup's
variance is the seeds' spread plus the windows' (each over the number of contrasts): the windows'
noise is counted twice, once inside the seeds' spread, which errs on the wide side, and a single
seed still gets an interval. Degrees of freedom: Welch-Satterthwaite.

The speedup itself is the ratio of mean throughputs over the seeds both sides finished, the
interval that ratio times exp(+-t x error): positive by construction, never clipped.

A comparison timed sequentially (one seed side by side, rounds until the stopping rule decided:
execution.side_by_side) takes its speedup and interval from that rule instead (`sequential_ratio`):
the trimmed mean of its paired windows' ratios, and the rule's repeated interval, which holds at
whichever round the timing stopped, as a fixed t interval looked at after every round would not; so
the answer says what the stop decided, never more.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from amp_suite.analysis.ratios import INTERVAL_LEVEL, t_quantile
from amp_suite.analysis.sequential import StoppingRule, decide
from amp_suite.config.base import window_edges
from amp_suite.records.results import CellRecord


@dataclass(frozen=True)
class Contrast:
    """One seed's log speedup and its standard error from the windows (None: no windows to tell)."""

    log_ratio: float
    error: float | None
    degrees: float | None
    side_by_side: bool


def contrasts(mode: Sequence[CellRecord], baseline: Sequence[CellRecord]) -> list[Contrast]:
    """One seed's records of a mode and of its baseline: a contrast for each pair of cells that ran
    side by side (runs repeated on one machine give several), else one from all of them, one after
    another (several hosts: their mean throughput)."""
    pairs = [(a, b) for a in mode for b in baseline if _side_by_side(a, b)]
    if pairs:
        return [_paired(a, b) for a, b in pairs]
    rates = [r.throughput for r in mode if r.throughput], [r.throughput for r in baseline if r.throughput]
    if not rates[0] or not rates[1]:
        return []
    log_ratio = math.log(statistics.fmean(rates[0]) / statistics.fmean(rates[1]))
    return [Contrast(log_ratio, *_welch_error(_logs(mode[0]), _logs(baseline[0])), False)]


def _paired(mode: CellRecord, baseline: CellRecord) -> Contrast:
    assert mode.throughput and baseline.throughput
    log_ratio = math.log(mode.throughput / baseline.throughput)
    kept = _kept(mode) & _kept(baseline)  # a pair either of whose windows a hiccup hit is left out
    pairs = [(mode.throughput_windows[i], baseline.throughput_windows[i]) for i in sorted(kept)]
    return Contrast(log_ratio, *_paired_error(pairs), True)


def _kept(record: CellRecord) -> set[int]:
    """The indices of the record's windows not set aside (instruments.timers.outliers)."""
    return set(range(len(record.throughput_windows))) - {w.window for w in record.windows_set_aside}


def _side_by_side(a: CellRecord, b: CellRecord) -> bool:
    return (
        a.side_by_side_id is not None
        and a.side_by_side_id == b.side_by_side_id
        and len(a.throughput_windows) == len(b.throughput_windows) >= 2
    )


def _logs(record: CellRecord) -> list[float]:
    windows = record.throughput_windows
    return [math.log(windows[i]) for i in sorted(_kept(record)) if windows[i] > 0]


def _paired_error(pairs: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    differences = [math.log(a / b) for a, b in pairs]
    if len(differences) < 2:
        return None, None
    return statistics.stdev(differences) / math.sqrt(len(differences)), len(differences) - 1


def _welch_error(mode: list[float], baseline: list[float]) -> tuple[float | None, float | None]:
    if len(mode) < 2 or len(baseline) < 2:
        return None, None
    parts = [statistics.variance(logs) / len(logs) for logs in (mode, baseline)]
    variance = sum(parts)
    if variance == 0:
        return 0.0, float(len(mode) + len(baseline) - 2)
    degrees = variance**2 / sum(p**2 / (len(logs) - 1) for p, logs in zip(parts, (mode, baseline), strict=True))
    return math.sqrt(variance), degrees


def sequential_ratio(
    mode: Sequence[CellRecord], baseline: Sequence[CellRecord]
) -> tuple[float, tuple[float, float]] | None:
    """The stopping rule's speedup and interval for one seed's pair timed sequentially, from every
    round's paired windows as the runner decided on them: the trimmed mean of their ratios (the rule
    sets its own outliers aside) and its repeated interval; None for anything else."""
    pairs = [(a, b) for a in mode for b in baseline if _side_by_side(a, b)]
    if len(pairs) != 1 or any(r.timing_stop is None or r.timing_stop.rule != "sequential" for r in pairs[0]):
        return None
    a, b = pairs[0]
    paired_windows = zip(a.throughput_windows, b.throughput_windows, strict=True)
    # A window that is not a positive, finite rate has no log ratio (records.results sets it aside).
    ratios = [math.log(x / y) for x, y in paired_windows if 0 < x < math.inf and 0 < y < math.inf]
    # The runner's decision stands from the round it was made at (execution.side_by_side).
    ratios = ratios[: a.timing_stop.decided_at.get(a.precision, len(ratios))]
    budget = (a.config.get("stopping") or {}).get("budget", 1)
    windows = len(window_edges(a.steps)) - 1
    if windows < 4 or not windows <= len(ratios) <= windows * budget:
        return None
    decision = decide(ratios, StoppingRule(min_rounds=windows, max_rounds=windows * budget))
    return None if decision.ratio is None or decision.interval is None else (decision.ratio, decision.interval)


def interval(
    ratio: float | None, contrasts: Sequence[Contrast], level: float = INTERVAL_LEVEL
) -> tuple[float, float] | None:
    """The speedup's interval around `ratio`, from the contrasts (a seed's, or a pair's where a seed
    ran side by side more than once); None where nothing varies that could give one (a single seed
    without windows)."""
    if ratio is None or ratio <= 0 or not contrasts:
        return None
    count = len(contrasts)
    within = [c.error**2 for c in contrasts if c.error is not None]
    parts: list[tuple[float, float]] = []  # (variance of the mean log ratio, its degrees of freedom)
    if count >= 2:
        parts.append((statistics.variance([c.log_ratio for c in contrasts]) / count, count - 1))
    if len(within) == count:
        degrees = sum(c.degrees for c in contrasts if c.degrees is not None)
        parts.append((statistics.fmean(within) / count, max(degrees, 1.0)))
    if not parts:
        return None
    variance = sum(v for v, _ in parts)
    if variance == 0:
        return ratio, ratio
    degrees = variance**2 / sum(v**2 / d for v, d in parts)
    half = t_quantile(0.5 + level / 2, degrees) * math.sqrt(variance)
    return ratio * math.exp(-half), ratio * math.exp(half)
