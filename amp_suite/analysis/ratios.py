"""Seed-paired ratios of means and their intervals: speedups, memory ratios, times to target. No torch here."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from functools import cache

INTERVAL_LEVEL = 0.95


def paired_ratio(values: dict[int, float], baseline: dict[int, float]) -> float | None:
    """mean(values) / mean(baseline) over the seeds both have (over all seeds if none is shared)."""
    seeds = values.keys() & baseline.keys()
    if seeds:
        values, baseline = {s: values[s] for s in seeds}, {s: baseline[s] for s in seeds}
    return ratio(mean_of(values.values()), mean_of(baseline.values()))


def ratio_interval(
    values: dict[int, float], baseline: dict[int, float], level: float = INTERVAL_LEVEL
) -> tuple[float, float] | None:
    """Interval on mean(values) / mean(baseline) over the seeds both have (paired), on the log
    scale: that ratio times exp(+-t x the standard error of the seeds' log ratios). A ratio of
    positive quantities stays positive, however noisy the seeds, and nothing is clipped. None with
    fewer than two paired seeds, or where a value is not positive."""
    seeds = sorted(values.keys() & baseline.keys())
    middle = paired_ratio(values, baseline)
    if len(seeds) < 2 or middle is None or not all(values[s] > 0 and baseline[s] > 0 for s in seeds):
        return None
    logs = [math.log(values[s] / baseline[s]) for s in seeds]
    half = t_quantile(0.5 + level / 2, len(seeds) - 1) * statistics.stdev(logs) / math.sqrt(len(seeds))
    return middle * math.exp(-half), middle * math.exp(half)


def mean_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return value / baseline


@cache
def t_quantile(probability: float, degrees_of_freedom: float) -> float:
    # Student's t quantile from scipy.special: scipy.stats would cost seconds to import on every run.
    from scipy.special import stdtrit

    return float(stdtrit(degrees_of_freedom, probability))
