"""Side by side: the precisions of one comparison take turns on the device, one window of their
timed steps at a time.

Why. A machine's speed changes under a run: a neighbour's load comes and goes, a GPU heats up and
lowers its clocks, a power cap bites. Cells timed one after another carry whatever changed between
them into their ratio, and a single busy minute can make either look faster. Cells that take turns
window by window share the machine's state: a change lands on the windows on both sides of a pair,
and the speedup comes from windows measured next to each other (amp_suite.analysis.speedup). The
turns go round in the cells' order, then back in the reverse order (A B C, C B A, A B C, ...), so
that a steady drift weighs on every cell alike; a change within a pair of windows shows as their
spread, which widens the speedup's interval instead of moving it.

How. Each cell runs in its own process, as every cell does. They start one at a time: each
prepares, compiles and warms up while those before it wait (nothing is timed while another cell
works), then says what it holds on the device (amp_suite.cell.turns). The next starts only if the
device has room for another cell as large as the largest so far; those that do not fit run alone
after the others have ended, and their records say so. Once every cell is ready, the run grants
one window at a time; a cell that ends early (skipped, failed) gives up its turns. After the last
window, all of them go on to their evaluations. A cell that runs out of memory while others hold
the device is run again alone, after them: memory they held is not its own result.

How long. After the fixed schedule's windows, sequential timing (the matrix's `stopping`, by
default) grants round after round while a mode's speed against the comparison's reference is
undecided by the stopping rule (analysis.sequential: each round's paired windows' log-ratios), up
to its budget in rounds and seconds; `fixed` releases the cells after the schedule. A mode's first
decision stands (a later round could only re-open it). Past the schedule each round's order is
drawn, from a seed the comparison fixes: a neighbour's load that switches in step with strict
turns would otherwise land on one side of every pair (in simulation, false "faster" rose to 31%;
drawn, it stayed within 4%). The release says how the timing stopped, and each record keeps it
(`timing_stop`).

Cost. Every cell of the comparison holds its memory on the device until the last window; per
window, one handover (two pipe messages and, on a GPU, the cell's queued kernels drained), outside
every timed span. The cells' preparation and evaluation take as long as one after another.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Literal

from amp_suite.analysis.sequential import UNDECIDED, Decision, StoppingRule, decide
from amp_suite.config import AUTO_BATCH, CellSpec, Matrix
from amp_suite.config.base import OOM, turns_before_timing, window_edges
from amp_suite.config.precisions import REFERENCE
from amp_suite.execution.worker import Cancelled
from amp_suite.hardware.backends import backend_named

# The next cell starts when the device's free memory is at least this many times the most any cell
# of the comparison holds, plus the headroom a new process needs before its first tensor (a CUDA
# context, cuDNN's and cuBLAS's workspaces; nothing on a CPU): its backend's new_process_mb.
ROOM_FACTOR = 1.2
WAKE_S = 0.5  # a cell's thread waiting for the others wakes this often to see whether the run is stopping

State = Literal["waiting", "starting", "ready", "left", "refused"]
SETTLED = ("ready", "left", "refused")


def comparisons(cells: Sequence[CellSpec]) -> list[list[CellSpec]]:
    """The cells in runs of one comparison each: consecutive cells that differ in precision alone
    (Matrix.cells puts every precision of one comparison and seed back to back)."""
    runs: list[list[CellSpec]] = []
    for spec in cells:
        if runs and _comparison(runs[-1][0]) == _comparison(spec):
            runs[-1].append(spec)
        else:
            runs.append([spec])
    return runs


def _comparison(spec: CellSpec) -> str:
    return spec.model_copy(update={"precision": "fp32", "force": False}).config_hash


def why_alone(cells: Sequence[CellSpec], matrix: Matrix, shared: bool) -> str | None:
    """Why a comparison's cells can't take turns, or None. `shared`: this run shares the device out
    between its cells in another way (--gpus, a Ray fleet)."""
    first = cells[0]
    if not matrix.side_by_side:
        return "the matrix sets side_by_side: false"
    if shared:
        return "cells run on GPUs or nodes of their own (--gpus, --ray)"
    if first.batch_size == AUTO_BATCH:
        return "batch_sizes auto: each precision fills the device on its own"
    if first.ddp is not None:
        return "a data-parallel cell holds devices of its own"
    if first.workload.kernel_benchmark:
        return "a kernel benchmark is timed by its GPU kernels alone: no host's pace to share"
    return None


def _rule(first: CellSpec, windows: int) -> StoppingRule | None:
    """The stopping rule of a sequentially timed comparison, its looks from the schedule's windows
    to the budget's; None on the fixed schedule (or one too short for the rule's first look)."""
    if first.stopping.rule != "sequential" or windows < 4:  # the rule's first look needs 4 pairs
        return None
    return StoppingRule(min_rounds=windows, max_rounds=windows * first.stopping.budget)


def turn_order(members: Sequence[int], rounds: int) -> list[int]:
    """Who has each turn: round by round, in the members' order, then in the reverse order."""
    order: list[int] = []
    for round_ in range(rounds):
        order += list(members) if round_ % 2 == 0 else list(reversed(members))
    return order


@dataclass
class _Member:
    spec: CellSpec
    state: State = "waiting"
    down: Connection | None = None
    held_mb: float = 0.0
    beside: int = 0  # the comparison's other cells alive when this one ended
    rates: list[float] = field(default_factory=list)  # samples/s of each timed window, in order


class SideBySide:
    """One comparison's cells taking turns. Each cell's thread calls `admit(i)` before it starts
    its process, runs it with `seat(i)`, and, where `alone(i)` gives a reason, runs it again (or
    for the first time) alone once `wait_over()` returns."""

    def __init__(self, cells: Sequence[CellSpec]) -> None:
        first = cells[0]
        self.members = [_Member(spec) for spec in cells]
        # The turns each cell takes: one a window, and one for the warmup steps it keeps back.
        windows = len(window_edges(first.steps)) - 1
        self.rounds = windows + (1 if turns_before_timing(first.warmup_steps) else 0)
        self.rule = _rule(first, windows)
        self.window_steps = first.steps // windows  # a round's steps a cell (window_edges: within one)
        self.budget_s = first.stopping.budget_s
        self.stopped: dict[str, object] | None = None  # how the timing stopped, once it has
        self.decided: dict[str, Decision] = {}  # each mode's first decision: it stands
        self._order = random.Random(first.config_hash)  # the rounds past the schedule: a seeded draw
        self._began = 0.0  # when the first turn was granted
        self.new_process_mb = backend_named(first.device).new_process_mb
        self.took_turns: list[int] = []  # the members that took turns, in their first round's order
        self._turns: list[int] | None = None  # who runs each window, once every member is settled
        self._position = 0
        self._free_mb: float | None = None  # the device's free memory, as the latest ready cell saw it
        self._refused: str | None = None
        self._changed = threading.Condition()
        self.alone_lock = threading.Lock()  # cells that run alone run one at a time

    # The cells' threads ---------------------------------------------------------------------------

    def admit(self, index: int, cancelled: threading.Event) -> bool:
        """Wait until the cells before this one are ready (or gone); whether it fits beside them."""
        with self._changed:
            self._wait(lambda: all(m.state in SETTLED for m in self.members[:index]), cancelled)
            member = self.members[index]
            if self._refused is None and not self._room():
                largest = max(m.held_mb for m in self.members[:index])
                self._refused = (
                    f"did not fit beside the other cells of its comparison ({self._free_mb:,.0f} MB free, one cell"
                    f" holds up to {largest:,.0f} MB): measured alone, after them"
                )
            member.state = "refused" if self._refused else "starting"
            self._start_turns()
            return member.state == "starting"

    def seat(self, index: int) -> _Seat:
        return _Seat(self, index)

    def alone(self, index: int, status: str) -> str | None:
        """Why the cell must (also) run alone, given how its seat ended: it was refused a seat, or it
        ran out of memory while other cells of the comparison held the device."""
        member = self.members[index]
        if member.state == "refused":
            return self._refused
        if status == OOM and member.beside:
            others = "cell" if member.beside == 1 else "cells"
            return f"out of memory beside {member.beside} other {others} of its comparison: measured alone, after them"
        return None

    def wait_over(self, cancelled: threading.Event) -> None:
        """Until every cell that took a seat has ended."""
        with self._changed:
            self._wait(lambda: all(m.state in ("left", "refused") for m in self.members), cancelled)

    def paired(self, index: int) -> list[str]:
        """The cell ids that took turns, in their first round's order, where this cell was one of
        two or more; [] where it took turns with nobody."""
        if index not in self.took_turns or len(self.took_turns) < 2:
            return []
        return [self.members[i].spec.cell_id for i in self.took_turns]

    # What the cells say (from their threads, through their seats) --------------------------------

    def _ready(self, index: int, memory: dict[str, float], down: Connection) -> None:
        with self._changed:
            member = self.members[index]
            member.state, member.down = "ready", down
            member.held_mb = float(memory.get("held_mb", 0.0))
            self._free_mb = float(memory.get("free_mb", 0.0))
            self._changed.notify_all()
            self._start_turns()

    def _turn_done(self, index: int, rate: float | None) -> None:
        with self._changed:
            if rate is not None:  # a timed window's (the warmup steps' turn has none)
                self.members[index].rates.append(rate)
            if self._turns is not None and self._position < len(self._turns) and self._turns[self._position] == index:
                self._position += 1
                self._grant()

    def _left(self, index: int) -> None:
        with self._changed:
            member = self.members[index]
            member.beside = sum(1 for m in self.members if m is not member and m.state in ("starting", "ready"))
            member.state, member.down = "left", None
            self._changed.notify_all()
            if self._turns is None:
                self._start_turns()
            elif self._position < len(self._turns) and self._turns[self._position] == index:
                self._position += 1  # it ended in its turn, or before it came
                self._grant()

    # Under the lock -------------------------------------------------------------------------------

    def _wait(self, done: Callable[[], bool], cancelled: threading.Event) -> None:
        """Wait for `done`, waking now and then to see whether the run is stopping (signals go to
        the main thread: this one is told through `cancelled`)."""
        while not self._changed.wait_for(done, timeout=WAKE_S):
            if cancelled.is_set():
                raise Cancelled()

    def _room(self) -> bool:
        held = [m.held_mb for m in self.members if m.state == "ready"]
        if not held or self._free_mb is None:
            return True  # the first cell, or nobody ready to measure by: nothing to fit beside
        return self._free_mb >= ROOM_FACTOR * max(held) + self.new_process_mb

    def _start_turns(self) -> None:
        """Once every cell is ready, gone or refused: the turns begin."""
        if self._turns is not None or not all(m.state in SETTLED for m in self.members):
            return
        self.took_turns = [i for i, m in enumerate(self.members) if m.state == "ready"]
        self._turns = turn_order(self.took_turns, self.rounds)
        self._began = time.monotonic()
        self._grant()

    def _grant(self) -> None:
        """The next window to a cell still there; after the last, every cell is released."""
        assert self._turns is not None
        while True:
            while self._position < len(self._turns):
                if self._send(self._turns[self._position], "go"):
                    return
                self._position += 1
            if not self._another_round():
                break
        for index in self.took_turns:
            self._send(index, ("release", self.stopped))

    def _another_round(self) -> bool:
        """After the schedule and each round past it: whether to grant one more (sequential timing,
        a mode still undecided, budget left); else `stopped` says why not."""
        present = [i for i in self.took_turns if self.members[i].state == "ready"]
        rounds = min((len(self.members[i].rates) for i in present), default=0)
        seconds = time.monotonic() - self._began
        stop = {"rule": "fixed" if self.rule is None else "sequential", "rounds": rounds, "seconds": seconds,
                "steps": rounds * self.window_steps}  # fmt: skip
        if self.rule is None or len(present) < 2:
            self.stopped = {**stop, "stopped": "fixed"}
            return False
        decisions = self._decisions(present, rounds)
        undecided = [d for d in decisions.values() if d.verdict == UNDECIDED]
        stop |= {
            "verdicts": {precision: d.verdict for precision, d in decisions.items()},
            "decided_at": {precision: d.rounds for precision, d in decisions.items() if d.verdict != UNDECIDED},
        }
        if not undecided:
            self.stopped = {**stop, "stopped": "decided"}
            return False
        per_round = seconds / max(1, rounds)
        if rounds >= self.rule.max_rounds or (self.budget_s is not None and seconds + per_round > self.budget_s):
            self.stopped = {**stop, "stopped": "budget", "more_rounds": max(d.more_rounds or 0 for d in undecided)}
            return False
        self._turns += self._order.sample(self.took_turns, len(self.took_turns))
        return True

    def _decisions(self, present: list[int], rounds: int) -> dict[str, Decision]:
        """Each mode's decision against the comparison's reference (fp32, else its first cell), on
        the rounds both timed; a mode decided before keeps its decision."""
        reference = next((i for i in present if self.members[i].spec.precision == REFERENCE), present[0])
        base = self.members[reference].rates[:rounds]
        found = dict(self.decided)
        for index in present:
            precision = self.members[index].spec.precision
            if index == reference or precision in self.decided:
                continue
            mine = self.members[index].rates[:rounds]
            ratios = [math.log(a / b) for a, b in zip(mine, base, strict=True) if a > 0 and b > 0]
            found[precision] = decide(ratios, self.rule)
            if found[precision].verdict != UNDECIDED:
                self.decided[precision] = found[precision]
        return found

    def _send(self, index: int, word: object) -> bool:
        member = self.members[index]
        if member.state != "ready" or member.down is None:
            return False
        try:
            member.down.send(word)
        except OSError:  # the process is gone; its thread will say so
            return False
        return True


class _Seat:
    """What one cell's pipe says, passed to its comparison (execution.worker.Seat)."""

    def __init__(self, comparison: SideBySide, index: int) -> None:
        self.comparison, self.index = comparison, index

    def ready(self, memory: dict[str, float], down: Connection) -> None:
        self.comparison._ready(self.index, memory, down)

    def turn_done(self, rate: float | None = None) -> None:
        self.comparison._turn_done(self.index, rate)

    def left(self) -> None:
        self.comparison._left(self.index)
