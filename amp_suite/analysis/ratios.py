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
    """Interval on mean(values) / mean(baseline) over the seeds both have (paired).

    Delta method: the ratio's standard error is that of the residuals values - r x baseline,
    divided by the baseline mean. None with fewer than two paired seeds."""
    seeds = sorted(values.keys() & baseline.keys())
    if len(seeds) < 2:
        return None
    a, b = [values[s] for s in seeds], [baseline[s] for s in seeds]
    middle = statistics.fmean(a) / statistics.fmean(b)
    residuals = [x - middle * y for x, y in zip(a, b, strict=True)]
    error = statistics.stdev(residuals) / math.sqrt(len(seeds)) / statistics.fmean(b)
    half = t_quantile(0.5 + level / 2, len(seeds) - 1) * error
    # The delta method's interval is symmetric; a ratio of positive rates is not below 0, however
    # noisy the seeds (a low end under 0 says "anything from nothing up").
    return max(middle - half, 0.0), middle + half


def mean_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or not baseline:
        return None
    return value / baseline


@cache
def t_quantile(probability: float, degrees_of_freedom: int) -> float:
    # Student's t quantile from scipy.special: scipy.stats would cost seconds to import on every run.
    from scipy.special import stdtrit

    return float(stdtrit(degrees_of_freedom, probability))
