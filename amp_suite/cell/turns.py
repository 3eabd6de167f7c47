"""A cell's side of taking turns on the device with the other precisions of its comparison.

Side by side (amp_suite.execution.side_by_side), every cell of a comparison prepares and warms up
in a process of its own, then says it is ready and waits. The run hands the device to one cell at a
time, for one window of its timed steps; the cell finishes the window (on a GPU, waits for its
queued kernels), lets its threads settle, and hands it back with the window's rate. After the
fixed schedule's windows, the run either grants another round of turns (sequential timing: until
the stopping rule decides, or the budget ends) or releases them all, saying how the timing stopped.
A cell that runs alone has an `Alone`: every call returns at once. The worker carries the messages
(execution.worker).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Protocol


class Turns(Protocol):
    shared: bool  # the device is shared: each turn's first step re-warms it, untimed (cell.windows)

    def ready(self, memory: dict[str, float]) -> None:
        """Warmed up, holding `memory` (its backend's held()): waiting for the first turn."""

    def take(self) -> None:
        """Wait until this cell may run its next window."""

    def give(self, rate: float | None = None) -> None:
        """The window is done (at `rate` samples/s; None: no timed window) and the device idle:
        the next cell may run its own."""

    def again(self) -> bool:
        """After the fixed schedule and each round past it: True, this cell's turn for one more
        window; False, released (no cell of the comparison times its steps any more)."""

    @property
    def stopped(self) -> dict[str, object] | None:
        """Once released: how the comparison's timing stopped (execution.side_by_side), or None."""


class Alone:
    """A cell that takes turns with nobody."""

    shared = False

    def ready(self, memory: dict[str, float]) -> None:
        pass

    def take(self) -> None:
        pass

    def give(self, rate: float | None = None) -> None:
        pass

    def again(self) -> bool:
        return False

    @property
    def stopped(self) -> dict[str, object] | None:
        return None


ALONE = Alone()


def give(turns: Turns, rate: float | None = None) -> None:
    """Hand the device over once this process's threads have stopped (`settle`)."""
    if turns.shared:
        settle()
    turns.give(rate)


def ready(turns: Turns, memory: dict[str, float]) -> None:
    """Ready for the first turn once this process's threads have stopped, as for every other."""
    if turns.shared:
        settle()
    turns.ready(memory)


SETTLE_LIMIT_S = 0.05
SETTLE_POLL_S = 0.0005


def settle(limit_s: float = SETTLE_LIMIT_S) -> None:
    """Wait until this process's other threads stop running, for at most `limit_s`. OpenMP's
    workers spin for a while after each parallel region before they sleep (about 4 ms on a 2-core
    Xeon): a turn handed over at once would start the next cell's window on cores still taken."""
    me = os.getpid()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and _running_threads(me):
        time.sleep(SETTLE_POLL_S)


def _running_threads(pid: int) -> int:
    """This process's threads other than the calling one that are running (state R in /proc)."""
    running = 0
    me = threading.get_native_id()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0  # no /proc: nothing to wait for
    for task in tasks:
        if int(task) == me:
            continue
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except OSError:
            continue  # the thread ended
        running += stat[stat.rindex(")") + 2] == "R"  # the state follows the command's closing parenthesis
    return running
