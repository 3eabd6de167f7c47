"""Time to target: the timed steps in runs of `eval_every` steps, with the validation set evaluated
between runs. An evaluation is in no step time and no span (the step timer splits around it), and
outside every instrument that can pause (host CPU time, the GPU's energy): throughput and the
record's rates are the training's alone, and the evaluations' wall time is recorded as `eval_s`.

Evaluating never changes the run: the model is in eval mode (no dropout draws, BatchNorm's running
statistics untouched), the batches are drawn in an order fixed before training, and the optimizer
is not touched; the loss curve is the one an unevaluated run would have.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from amp_suite.cell.loop import Curves, Trainer
from amp_suite.data import DeviceBatches
from amp_suite.instruments.timers import CpuStepTimer, CudaStepTimer
from amp_suite.records.results import EvalPoint, first_reaching


@dataclass(frozen=True)
class Evaluations:
    """The evaluations made between runs of timed steps: (timed steps done, primary metric)."""

    points: list[tuple[int, float]]
    seconds: float  # their wall time

    def curve(self, spans_s: list[float], warmup_steps: int, steps: int, final_metric: float) -> list[EvalPoint]:
        """Every evaluation with its timed seconds so far (run i ends at evaluation i), then the
        cell's final one, at the end of the timed steps."""
        elapsed = [sum(spans_s[: i + 1]) for i in range(len(spans_s))]
        points = [*self.points, (steps, final_metric)]
        return [
            EvalPoint(step=warmup_steps + done, train_s=seconds, metric=metric)
            for (done, metric), seconds in zip(points, elapsed, strict=True)
        ]


def train_with_evaluations(
    trainer: Trainer,
    batches: DeviceBatches,
    steps: int,
    timer: CpuStepTimer | CudaStepTimer,
    on_step: Callable[[int], None],
    every: int | None,
    evaluate: Callable[[], float],
    paused: Callable[[], AbstractContextManager[object]],
) -> tuple[Curves, Evaluations]:
    """`steps` timed steps, evaluating every `every` of them (None: never; the cell evaluates at the
    end in any case). `paused` wraps each evaluation: the instruments it must not count."""
    if every is None or every >= steps:
        return trainer.run(batches, steps, timer, on_step), Evaluations([], 0.0)
    runs, points, seconds, done = [], [], 0.0, 0
    while done < steps:
        count = min(every, steps - done)
        runs.append(trainer.run(batches, count, timer, lambda n, before=done: on_step(before + n)))
        done += count
        if done < steps:  # the last evaluation is the cell's final one, after the timed region
            timer.split()
            clock = time.perf_counter()
            with paused():
                points.append((done, evaluate()))
            seconds += time.perf_counter() - clock
    curves = (torch.cat([losses for losses, _ in runs]), torch.cat([norms for _, norms in runs]))
    return curves, Evaluations(points, seconds)


def target_fields(curve: list[EvalPoint], target: float | None, higher_is_better: bool) -> dict[str, object]:
    """The record's time to its declared target: the first evaluation at or past it (None: not reached)."""
    if target is None:
        return {}
    reached = first_reaching(curve, target, higher_is_better)
    return {
        "target": target,
        "steps_to_target": reached and reached.step,
        "time_to_target_s": reached and reached.train_s,
    }
