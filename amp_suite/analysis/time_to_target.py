"""Time to target per precision, against fp32's: what a user finally pays for. No torch here.

A workload's `target` (config.workloads.TargetConfig) is a value of its primary validation metric,
or a fraction of the quality fp32's runs end at (their mean final metric; divided by the fraction
where lower is better), as MLPerf derives targets from reference runs. Each run's time to it is the
timed training seconds to its first evaluation at or past it (records.results.EvalPoint): warmup
steps and the evaluations themselves are not counted, for every precision alike. A run that
diverged, or ended short of the target, did not reach it.

The speedup to target is fp32's time over this mode's, over the seeds both reached, with the
same seed-paired 95% interval as the throughput speedup (analysis.ratios).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from amp_suite.analysis.ratios import paired_ratio, ratio_interval
from amp_suite.config import TargetConfig
from amp_suite.config.base import DIVERGED, OK
from amp_suite.records.results import CellRecord, EvalPoint, first_reaching


@dataclass(frozen=True)
class TimeToTarget:
    target: float  # the primary metric's value to reach
    described: str  # "val_accuracy 0.9", "95% of fp32's val_accuracy (0.909)"
    reached: int  # seeds whose every run reached it
    seeds: int  # seeds evaluated (ok or diverged)
    steps: float | None  # mean optimizer steps to it (warmup included), over the seeds that reached it
    seconds: float | None  # mean timed training seconds to it, over the same seeds
    speedup: float | None  # fp32's time / this mode's, over the seeds both reached
    speedup_interval: tuple[float, float] | None  # 95%, with two or more such seeds
    short_of_fp32: int = 0  # seeds on which fp32 reached it and this mode did not: what counts against it

    @property
    def all_reached(self) -> bool:
        return self.reached == self.seeds

    @property
    def counted(self) -> str:
        """Seeds that reached it, of those evaluated: "3/3"."""
        return f"{self.reached}/{self.seeds}"


def time_to_target(group: Sequence[CellRecord], fp32: Sequence[CellRecord]) -> TimeToTarget | None:
    """This precision's time to its workload's target, against fp32's records of the same setup.
    None where the workload declares no target, or fp32 has no final metric to derive it from."""
    config = _target_config(group)
    evaluated = [r for r in group if r.eval_curve and r.status in (OK, DIVERGED)]
    if config is None or not evaluated:
        return None
    higher = next((r.val_higher_is_better for r in evaluated if r.val_higher_is_better is not None), True)
    resolved = _resolve(config, fp32, higher)
    if resolved is None:
        return None
    target, described = resolved
    mine, theirs = _seconds_by_seed(evaluated, target), _seconds_by_seed(fp32, target)
    reached = {seed: s for seed, s in mine.items() if s is not None}
    fp32_times = {seed: s for seed, s in theirs.items() if s is not None and seed in reached}
    paired = {seed: reached[seed] for seed in fp32_times}  # this mode's times, on the seeds both reached
    steps = [p.step for r in evaluated if (p := crossing(r, target)) and r.seed in reached]
    return TimeToTarget(
        target=target,
        described=described,
        reached=len(reached),
        seeds=len(mine),
        steps=statistics.fmean(steps) if steps else None,
        seconds=statistics.fmean(reached.values()) if reached else None,
        speedup=paired_ratio(fp32_times, paired) if paired else None,
        speedup_interval=ratio_interval(fp32_times, paired),
        short_of_fp32=sum(1 for seed, s in mine.items() if s is None and theirs.get(seed) is not None),
    )


def _target_config(group: Sequence[CellRecord]) -> TargetConfig | None:
    workload = group[0].config.get("workload") if group else None
    target = workload.get("target") if isinstance(workload, dict) else None
    return TargetConfig.model_validate(target) if isinstance(target, dict) else None


def _resolve(config: TargetConfig, fp32: Sequence[CellRecord], higher: bool) -> tuple[float, str] | None:
    name = next((r.val_metric_name for r in fp32 if r.val_metric_name), None) or "the validation metric"
    if config.value is not None:
        return config.value, config.describe(name)
    finals = [r.val_metric for r in fp32 if r.status == OK and r.val_metric is not None]
    if not finals or config.of_fp32 is None:
        return None
    mean = statistics.fmean(finals)
    target = mean * config.of_fp32 if higher else mean / config.of_fp32
    return target, f"{config.describe(name)} ({target:.4g})"


def crossing(record: CellRecord, target: float) -> EvalPoint | None:
    """The run's first evaluation at or past the target; None where it ended short or did not finish."""
    if record.status != OK:
        return None
    higher = record.val_higher_is_better if record.val_higher_is_better is not None else True
    return first_reaching(record.eval_curve, target, higher)


def _seconds_by_seed(records: Sequence[CellRecord], target: float) -> dict[int, float | None]:
    """Each evaluated seed's mean time to target over its runs (hosts), None unless every run reached it."""
    runs: dict[int, list[EvalPoint | None]] = {}
    for record in records:
        if record.eval_curve and record.status in (OK, DIVERGED):
            runs.setdefault(record.seed, []).append(crossing(record, target))
    return {
        seed: None if None in points else statistics.fmean(p.train_s for p in points)  # type: ignore[union-attr]
        for seed, points in runs.items()
    }

