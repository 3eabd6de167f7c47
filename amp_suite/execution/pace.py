"""How long a running cell's steps take and how long it has left, from the progress it sends; and
the matrix's time left from its cells'. No torch here.

The parent hears a cell's progress at most once a second (execution.cell_process): the step it has
reached in its phase. Between two messages of one phase of steps, the time over the steps done is
its step time. The first message of a phase only starts the clock: the time before it was another
phase's (the first step builds lazy state and compiles; forced emulated bf16's first step took three
of its later ones). Waiting for its turn (side by side) is no step time: the wait is a phase of its
own, and the turn's grant starts the clock again (execution.worker).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

STEP_PHASES = ("warmup", "measure")
WAITING = "waiting for its turn"  # a phase the parent reports for a cell side by side between its turns
RECENT = 20  # step times kept: a cell whose steps speed up (or slow down) shows its pace now
SLOW_S = 60.0  # timed steps expected to take longer than this get a printed estimate, forced or not


def words_for(seconds: float) -> str:
    """A wait as it is planned: "40 s", "8 min", "1.5 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def step_words(seconds: float) -> str:
    """A step's time: "8.1 s", "85 ms", "0.42 ms"."""
    if seconds >= 1:
        return f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"
    milliseconds = seconds * 1e3
    return f"{milliseconds:.0f} ms" if milliseconds >= 10 else f"{milliseconds:.2g} ms"


@dataclass
class Pace:
    """One cell's steps, as the parent hears them."""

    warmup_steps: int
    steps: int
    clock: Callable[[], float] = time.monotonic
    phase: str = "starting"
    done: int = 0
    total: int = 0
    at: float = 0.0  # when the latest message came
    steps_phase: str | None = None  # the latest phase of steps: a wait or an evaluation goes on from it
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))

    def heard(self, phase: str, done: int, total: int) -> None:
        now = self.clock()
        if phase == self.phase and done > self.done and self.stepping:
            self.step_times.append((now - self.at) / (done - self.done))
        self.phase, self.done, self.total, self.at = phase, done, total, now
        if self.stepping:
            self.steps_phase = phase.rsplit(": ", 1)[-1]

    @property
    def stepping(self) -> bool:
        return self.phase.rsplit(": ", 1)[-1] in STEP_PHASES  # a batch search's probe: "probe bs8: measure"

    @property
    def step_s(self) -> float | None:
        """The median of the recent step times: one slow step (a hiccup, a window's handover) moves it little."""
        return statistics.median(self.step_times) if self.step_times else None

    def phase_left_s(self) -> float | None:
        """Until the current phase of steps ends, counting down between messages; None outside steps."""
        if self.step_s is None or not self.stepping or not self.total:
            return None
        return max(0.0, (self.total - self.done) * self.step_s - (self.clock() - self.at))

    def cell_left_s(self) -> float | None:
        """Until the cell's warmup and timed steps end (its evaluation is not counted)."""
        if self.step_s is None:
            return None
        if self.steps_phase == "measure":
            return max(0, self.steps - self.done) * self.step_s
        return max(0, self.warmup_steps - self.done + self.steps) * self.step_s

    def words(self) -> str:
        """For the live bar: "8.1 s/step, ~7:45 left" (or "12.0 steps/s"); "" until a step is timed."""
        step = self.step_s
        if step is None or not self.stepping:
            return ""
        rate = f"{step_words(step)}/step" if step >= 1 else f"{_rate(1 / step)} steps/s"
        left = self.phase_left_s()
        return rate if left is None else f"{rate}, ~{_clock(left)} left"


def _rate(per_s: float) -> str:
    return f"{per_s:.1f}" if per_s < 100 else f"{per_s:,.0f}"


def _clock(seconds: float) -> str:
    minutes, second = divmod(int(seconds + 0.5), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}" if hours else f"{minute}:{second:02d}"


@dataclass
class MatrixPace:
    """The cells still to end, and the step time each comparison's cells have shown: a cell not yet
    started is estimated from a cell that differs from it in seed alone, or not at all."""

    paces: dict[str, Pace] = field(default_factory=dict)  # by cell id: the cells not ended
    kinds: dict[str, str] = field(default_factory=dict)  # by cell id: what its step time is shared with
    known: dict[str, float] = field(default_factory=dict)  # by kind: a step time seen
    unstarted: int = 0  # cells to run that have not started: nothing is known of them yet

    def add(self, cell_id: str, kind: str, pace: Pace) -> None:
        self.paces[cell_id], self.kinds[cell_id] = pace, kind
        self.unstarted = max(0, self.unstarted - 1)

    def ended(self, cell_id: str) -> None:
        self.learn(cell_id)
        self.paces.pop(cell_id, None)

    def learn(self, cell_id: str) -> None:
        pace = self.paces.get(cell_id)
        if pace is not None and pace.step_s is not None:
            self.known[self.kinds[cell_id]] = pace.step_s

    def left(self) -> tuple[float, int]:
        """(seconds of steps left in the cells that can be estimated, how many cells can't)."""
        seconds, unknown = 0.0, self.unstarted
        for cell_id, pace in self.paces.items():
            left = pace.cell_left_s()
            if left is None and self.kinds[cell_id] in self.known:
                left = (pace.warmup_steps + pace.steps) * self.known[self.kinds[cell_id]]
            if left is None:
                unknown += 1
            else:
                seconds += left
        return seconds, unknown

    def words(self) -> str:
        seconds, unknown = self.left()
        if unknown == len(self.paces) + self.unstarted:
            return "time left unknown until a cell has timed its first steps" if unknown else ""
        not_yet = f" (+{unknown} cell{'s' if unknown > 1 else ''} not yet timed)" if unknown else ""
        return f"about {words_for(seconds)} of steps left{not_yet}"
