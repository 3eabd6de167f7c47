"""The stall watchdog: a cell that makes no progress for a stated time is stopped, and recorded
failed with the phase it stalled in. No torch here.

A user's model is untrusted code: a forward that deadlocks in one precision, a build() that never
returns, a process someone paused with SIGSTOP. Without a limit such a cell holds the run (and,
side by side, its partners, waiting for their turn) forever. The parent hears from each running
cell (execution.worker): a heartbeat from a thread of its own, every few seconds, and its progress,
a message at each phase and about every second of steps. A cell has stalled when

- nothing at all has been heard for `stall_s` (AMP_SUITE_STALL_S, 60 s by default): the process is
  stopped or frozen (its heartbeat's thread can't run either);
- in its steps, no step has completed for max(`stall_s`, 20 x its median step), or twice a window's
  steps where a turn's window is longer (a step of a window past the fixed schedule sends no word);
- in a phase without steps (prepare: the process's start, the data and the model's build();
  diagnostics; evaluate; the first warmup steps, which compile), nothing has changed for `phase_s`
  (AMP_SUITE_PHASE_LIMIT_S, 30 min by default: a large model's data, build and compilation take minutes).

A cell waiting for its turn on the device (side by side) is not stalled: its watch stops from the
moment it hands the device over until the run grants it the next turn. What the parent heard (the
phase, the step, each finished window's rate, where it runs) outlives the cell: a stalled or
interrupted cell's record keeps it.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from amp_suite.config import ConfigError

STALL_ENV, PHASE_ENV = "AMP_SUITE_STALL_S", "AMP_SUITE_PHASE_LIMIT_S"
DEFAULT_STALL_S = 60.0
DEFAULT_PHASE_S = 1800.0
MAX_LIMIT_S = 7 * 24 * 3600.0  # a week: past this a limit is no limit, and a typo
STEP_FACTOR = 20  # a step this many times the cell's median is a stall, not a slow step
STEP_PHASES = ("warmup", "measure", "replay")
# The first warmup steps compile (torch.compile; CUDA graphs record on the second and third call,
# cell.compilation.CALLS_BEFORE_REPLAY): they are a phase of their own, under the phase limit.
COMPILING_STEPS = 3


@dataclass(frozen=True)
class Limits:
    stall_s: float = DEFAULT_STALL_S
    phase_s: float = DEFAULT_PHASE_S

    @classmethod
    def from_environment(cls) -> Limits:
        """The limits the environment sets; ConfigError (one line, exit 2) for a value that is not one."""
        return cls(_seconds(STALL_ENV, DEFAULT_STALL_S), _seconds(PHASE_ENV, DEFAULT_PHASE_S))

    @property
    def heartbeat_s(self) -> float:
        """How often a cell says it is alive: several times within `stall_s`."""
        return min(5.0, max(0.1, self.stall_s / 5))


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.5 <= value <= MAX_LIMIT_S:  # NaN fails too
        raise ConfigError(f"{name}: give a number of seconds from 0.5 to {MAX_LIMIT_S:.0f}")
    return value


class Watch:
    """What the parent has heard from one running cell, and whether it has stalled. Its own
    thread feeds it; a side-by-side comparison's threads may grant it a turn (`granted`)."""

    def __init__(
        self, limits: Limits | None = None, window_steps: int = 1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or Limits.from_environment()
        self.window_steps = window_steps  # the steps of one timed window (config.base.window_edges)
        self.clock = clock
        self.restart()

    def restart(self) -> None:
        """A new process of the cell (or a batch search's probe of it): nothing heard yet."""
        now = self.clock()
        self.phase, self.done, self.total = "prepare", 0, 0  # the process, the hardware probe, data and build()
        self.windows: list[float] = []  # samples/s of each window it finished
        self.probed: dict[str, Any] = {}  # where it runs (machine, environment), once it said
        self.last_heard = self.last_progress = now
        self.waiting = False  # for its turn on the device, side by side
        self._steps_s: list[float] = []  # step times, from progress messages in a row
        self._waited = False  # since its last progress message: that interval is no step time

    # What the cell says -------------------------------------------------------------------------

    def heard(self) -> None:
        self.last_heard = self.clock()

    def progress(self, phase: str, done: int, total: int) -> None:
        now = self.clock()
        if phase == self.phase and done > self.done and not self._waited and self._in_steps():
            self._steps_s.append((now - self.last_progress) / (done - self.done))
        self.phase, self.done, self.total = phase, done, total
        self.last_heard = self.last_progress = now
        self._waited = False

    def window(self, rate: float | None) -> None:
        if rate is not None and math.isfinite(rate) and rate > 0:
            self.windows.append(rate)

    def wait_turn(self) -> None:
        """The cell handed the device over (or is ready for its first turn) and waits."""
        self.waiting, self._waited = True, True

    def granted(self) -> None:
        """The run gave the cell its turn (or released it): its clock runs again."""
        self.waiting, self.last_progress = False, self.clock()

    # The judgement ------------------------------------------------------------------------------

    def stalled(self) -> str | None:
        """Why the cell is stalled (the record's reason), or None."""
        now = self.clock()
        silent = now - self.last_heard
        if silent > self.limits.stall_s:
            return (
                f"stalled in {self.where()}: no heartbeat for {silent:.0f} s (limit {self.limits.stall_s:g} s);"
                " the process stopped responding (paused with SIGSTOP, or frozen)"
            )
        if self.waiting:
            return None
        quiet, (limit, what, why) = now - self.last_progress, self._limit()
        if quiet > limit:
            return f"stalled in {self.where()}: {what} for {quiet:.0f} s (limit {limit:g} s{why})"
        return None

    def where(self) -> str:
        """The phase, and the step within it where it counts steps: "measure (step 12 of 60)"."""
        return f"{self.phase} (step {self.done} of {self.total})" if self._in_steps() and self.total else self.phase

    def _in_steps(self) -> bool:
        return self.phase.rsplit(": ", 1)[-1] in STEP_PHASES  # a batch search's probe: "probe bs8: measure"

    def _limit(self) -> tuple[float, str, str]:
        """(the limit in seconds, what did not happen, why the limit is what it is)."""
        steady = self._in_steps() and (self.done >= COMPILING_STEPS or not self.phase.endswith("warmup"))
        if not steady:
            return self.limits.phase_s, "no progress", ""
        if not self._steps_s:  # no step time yet: the first steps after the compiling ones
            return self.limits.stall_s, "no step completed", ""
        median = statistics.median(self._steps_s)
        limit = round(max(self.limits.stall_s, median * max(STEP_FACTOR, 2 * self.window_steps)), 1)
        step = f"{median:.3g} s" if median >= 1 else f"{median * 1e3:.3g} ms"
        return limit, "no step completed", f"; its median step {step}"
