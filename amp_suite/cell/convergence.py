"""Time to target: the validation set evaluated every `eval_every` timed steps (amp_suite.cell.windows
runs them), and the declared target's crossing. An evaluation is in no step time and no span (the
step timer splits around it), and outside every instrument that can pause (host CPU time, the GPU's
energy): throughput and the record's rates are the training's alone, and the evaluations' wall time
is recorded as `eval_s`.

Evaluating never changes the run: the model is in eval mode (no dropout draws, BatchNorm's running
statistics untouched), the batches are drawn in an order fixed before training, and the optimizer
is not touched; the loss curve is the one an unevaluated run would have.
"""

from __future__ import annotations

from dataclasses import dataclass

from amp_suite.instruments.timers import Span
from amp_suite.records.results import EvalPoint, first_reaching


@dataclass(frozen=True)
class Evaluations:
    """The evaluations made between runs of timed steps: (timed steps done, primary metric)."""

    points: list[tuple[int, float]]
    seconds: float  # their wall time

    def curve(self, spans: list[Span], warmup_steps: int, steps: int, final_metric: float) -> list[EvalPoint]:
        """Every evaluation with the timed seconds of the steps before it, then the cell's final
        one, at the end of the timed steps."""
        points = [*self.points, (steps, final_metric)]
        return [
            EvalPoint(step=warmup_steps + done, train_s=sum(s.seconds for s in spans if s.end <= done), metric=metric)
            for done, metric in points
        ]


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
