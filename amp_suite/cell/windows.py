"""The timed steps, in windows of consecutive steps (config.base.window_edges).

Each window's throughput is one observation of the cell's speed: their spread says how steady the
machine was, and with a single seed they give a speedup its interval (analysis.speedup). Between two
windows a cell side by side with the other precisions of its comparison hands the device over
(`handover`: amp_suite.cell.turns), and every `every` steps it evaluates for time to target
(`evaluate`). Both happen between runs of steps: the step timer splits there, and `paused` leaves
them out of every instrument that can pause, so that throughput and the record's rates are the
training's alone.

Side by side (`rewarm`), each turn's first step trains like any other but is not timed: it finds the
caches filled with another process's data and that process's threads still spinning down (cut from
each window, a 1.3 ms CPU step took 3 to 6 ms there; the second step was back within 0.3 ms).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch

from amp_suite.cell.convergence import Evaluations
from amp_suite.cell.loop import Curves, Trainer
from amp_suite.cell.turns import Turns, give
from amp_suite.data import DeviceBatches
from amp_suite.instruments.timers import CpuStepTimer, CudaStepTimer

Pause = Callable[[], AbstractContextManager[object]]


def train_timed(
    trainer: Trainer,
    batches: DeviceBatches,
    timer: CpuStepTimer | CudaStepTimer,
    on_step: Callable[[int], None],
    *,
    edges: list[int],
    every: int | None,
    evaluate: Callable[[], float],
    paused: Pause,
    handover: Callable[[int], None],
    rewarm: bool = False,
) -> tuple[Curves, Evaluations]:
    """The timed steps, windows as `edges` gives them. At a window's end the cell evaluates first
    (if due), in its own turn, and hands over after."""
    steps, starts, ends = edges[-1], set(edges[:-1]), set(edges[1:-1])
    evaluations = set(range(every, steps, every)) if every else set()
    runs, points, seconds, done = [], [], 0.0, 0
    while done < steps:
        if done in ends:
            with paused():
                handover(edges[edges.index(done) - 1])  # the window that just ended began there
        if rewarm and done in starts:
            with paused():
                runs.append(trainer.run(batches, 1))
            timer.skip()
            done += 1
            on_step(done)
        else:
            stop = min(point for point in (*evaluations, *ends, steps) if point > done)
            runs.append(trainer.run(batches, stop - done, timer, lambda n, before=done: on_step(before + n)))
            done = stop
            timer.split()
        if done in evaluations:
            clock = time.perf_counter()
            with paused():
                points.append((done, evaluate()))
            seconds += time.perf_counter() - clock
    curves = (torch.cat([losses for losses, _ in runs]), torch.cat([norms for _, norms in runs]))
    return curves, Evaluations(points, seconds)


def timing_rounds(
    trainer: Trainer,
    batches: DeviceBatches,
    timer: CpuStepTimer | CudaStepTimer,
    turns: Turns,
    edges: list[int],
    samples_per_step: int,
    paused: Pause,
    on_step: Callable[[int, int], None] | None = None,
) -> list[int]:
    """After the fixed schedule: hand its last window over, then, while the run grants this cell
    another round (sequential timing, execution.side_by_side), one more window of the schedule's
    size, timed only: its losses are not kept and nothing evaluates after it. The windows' new edges.
    `on_step(steps done, steps to the round's end)`: each step of a round, counted on from the
    schedule's, so that a slow cell's rounds show their progress and its watchdog hears each step."""
    size, first, added = edges[-1] - edges[-2], edges[-2], []
    report = on_step or (lambda done, total: None)
    while True:
        with paused():
            give(turns, timer.rate_since(first, samples_per_step))
            if not turns.again():  # released: no cell of the comparison times its steps any more
                return added
        first = added[-1] if added else edges[-1]
        with paused():  # the turn's first step re-warms the device, as every turn's does: untimed
            trainer.run(batches, 1)
        timer.skip()
        report(first + 1, first + size)
        end = first + size
        trainer.run(batches, size - 1, timer, lambda n, before=first + 1, end=end: report(before + n, end))
        timer.split()
        added.append(end)
