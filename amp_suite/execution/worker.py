"""Run each cell in a fresh process, so allocator state and global flags never leak between cells.

Processes are forked from a forkserver that has already imported torch (and the matrix's
workload modules) but never touched CUDA: each cell starts clean in milliseconds instead of
paying seconds of imports. The child streams a heartbeat, throttled progress, each timed window's
rate as it ends and finally its record through a pipe; its stdout/stderr go to the cell's log file.
A child that dies without a record (killed for memory, segfault) is recorded as failed by the
parent; one that stalls is stopped by the parent's watchdog (amp_suite.execution.watchdog) and
recorded failed with the phase it stalled in.

The user's code runs in the child and may leave threads and processes behind (execution.process_tree).
So the child leads a process group of its own, adopts its orphans, and leaves through os._exit once
its record is sent, after ending every process below it: a non-daemon thread can't keep it alive,
nor can a child holding its pipe hold the parent, which stops reading at the record. A child whose
parent has gone finds out at its next heartbeat (the pipe is broken) and ends the same way: the
forkserver outlives the suite while any cell lives, so its death would tell the cell nothing.

A cell may be placed: given the GPUs it alone sees (CUDA_VISIBLE_DEVICES, set in the child before
CUDA starts) and its share of the CPU threads, when several cells run at once (amp_suite.execution.scheduler).
A cell may take a seat side by side with the other precisions of its comparison: a second pipe
then carries the run's word down to it, when it may run a window (amp_suite.execution.side_by_side).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Protocol

import amp_suite
from amp_suite.config import CellSpec
from amp_suite.config.base import FAILED
from amp_suite.execution.cell_process import LEAVE_LIMIT_S, child_main
from amp_suite.execution.pace import WAITING
from amp_suite.execution.process_tree import signal_all, signal_group
from amp_suite.execution.watchdog import Watch
from amp_suite.records.finish import finished
from amp_suite.records.jsonl import LineWriteError
from amp_suite.records.results import CellRecord

STOP_TIMEOUT_S = 5.0  # a terminated cell gets this long to exit cleanly before it is killed
LISTEN_S = 0.2  # the parent looks at a quiet cell (its stall, a stopping run) this often


Context = multiprocessing.context.BaseContext


@dataclass(frozen=True)
class Placement:
    """Where a cell runs when it shares the box: the GPUs it sees, and the CPU threads it may use."""

    visible_devices: str | None = None  # the GPUs it sees, in its backend's variable: "2", or "0,1" for DDP
    threads: int | None = None  # torch's intra-op threads; None keeps torch's default (every core)
    variable: str | None = None  # the variable that names them: the backend's of the cell's device


UNPLACED = Placement()  # the whole box: every GPU, every core


class Seat(Protocol):
    """A cell's place side by side with the other cells of its comparison (execution.side_by_side):
    what the cell says on its pipe, passed on. `down` is the pipe that carries the run's word to it."""

    def ready(self, memory: dict[str, float], down: Connection) -> None: ...
    def turn_done(self, rate: float | None) -> None: ...
    def left(self) -> None: ...


class Cancelled(Exception):
    """The run is stopping: the cell's process was stopped and it has no record."""


def working_directory_off_the_path() -> None:
    """The working directory can't shadow a dependency: a `datasets.py` or `torch.py` there would be
    imported instead of the real one. `python -m amp_suite` puts it first on this process's path,
    which multiprocessing hands the forkserver, and so every cell; `python -c` and `-m` put it first
    on a child's own (the entry check, the forkserver's start): PYTHONSAFEPATH (Python 3.11+) keeps
    it off theirs. A user's entry is found where it says (amp_suite.workloads.entry puts its folder
    on the path). Only the folder amp_suite itself is loaded from stays: a checkout run in place.
    `amp-suite run` calls it before it starts any process (a Ray worker's path is Ray's business)."""
    here = Path.cwd().resolve()
    home = Path(amp_suite.__file__).resolve().parent.parent
    if here == home:
        return
    sys.path[:] = [entry for entry in sys.path if _resolved(entry) != here]
    os.environ["PYTHONSAFEPATH"] = "1"


def _resolved(entry: str) -> Path | None:
    try:
        return Path(entry or ".").resolve()  # "" is the working directory
    except (OSError, RuntimeError):
        return None


def cell_context(preload: Iterable[str], start: bool = False) -> Context:
    """`start`: start the forkserver now, not at the first cell: its imports overlap the caller's."""
    context = multiprocessing.get_context("forkserver")
    # torch._dynamo too: building a torch.optim optimizer imports it, which takes seconds; loaded once
    # here, every cell forked from the server finds it loaded instead of paying that itself.
    # forkserver_exit last: its exit handler must run before those the other imports registered.
    context.set_forkserver_preload(["amp_suite.cell.run", "torch._dynamo", *preload, "amp_suite.cell.forkserver_exit"])
    if start:
        forkserver.ensure_running()  # returns at once; the server imports, then takes requests
    return context


def run_isolated(
    context: Context,
    spec: CellSpec,
    log_path: Path,
    on_progress: Callable[[str, int, int], None],
    target: Callable[..., None] | None = None,
    placement: Placement = UNPLACED,
    cancelled: threading.Event | None = None,
    seat: Seat | None = None,
    watch: Watch | None = None,
) -> CellRecord:
    """Run the cell in a child process; `target` replaces the child's entry point in tests.
    `cancelled`: for a cell run from a thread (the main thread gets signals, this one does not):
    once set, the cell is stopped and Cancelled raised. `seat`: the cell takes turns with others.
    `watch`: what the parent hears of the cell, and the stall watchdog's judgement (a fresh one if
    not given); a caller that keeps it has the windows of a cell that was stopped."""
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # the run folder was removed or replaced under the run: stop it as a failed write
        raise LineWriteError(exc.errno, f"cannot create {log_path.parent}: {exc.strerror}") from exc
    watch = watch if watch is not None else Watch()
    reader, writer = context.Pipe(duplex=False)
    down, down_writer = context.Pipe(duplex=False) if seat is not None else (None, None)
    args = (spec.model_dump_json(), writer, str(log_path), asdict(placement), down)
    beat = {} if target else {"beat_s": watch.limits.heartbeat_s}  # a test's target says nothing of its own
    process = context.Process(target=target or child_main, args=args, kwargs=beat)
    process.start()
    watch.restart()
    writer.close()  # the child (and what it forks) holds the only writers now
    if down is not None:
        down.close()
    heard, stalled = None, None
    try:
        granting = _Granting(down_writer, watch, on_progress) if down_writer is not None else None
        heard, stalled = _listen(reader, process, watch, on_progress, seat, granting, cancelled)
    finally:
        _stop_cell(process, recorded=heard is not None)
        reader.close()
        if seat is not None:
            seat.left()  # its turns, if any are left, pass to the others
            down_writer.close()
    if heard is not None:
        record = CellRecord.model_validate_json(heard)
    else:
        reason = stalled or _died(process.exitcode, log_path)
        # Where it ran, if it got that far, and the windows it finished.
        record = CellRecord.for_spec(spec, FAILED, reason, **watch.probed, throughput_windows=watch.windows)
    return finished(record, {"worker": {"log_path": str(log_path)}})


def _listen(
    reader: Connection,
    process: multiprocessing.process.BaseProcess,
    watch: Watch,
    on_progress: Callable[[str, int, int], None],
    seat: Seat | None,
    down: _Granting | None,
    cancelled: threading.Event | None,
) -> tuple[str | None, str | None]:
    """What the cell says, until its record: (the record's JSON, None); (None, why it stalled);
    or (None, None) once it has exited without one. The record ends the listening: a child of the
    cell's code may hold the pipe open for ever."""
    while True:
        if cancelled is not None and cancelled.is_set():
            raise Cancelled()
        stalled = watch.stalled()
        if stalled is not None:
            return None, stalled
        ready = wait([reader, process.sentinel], timeout=LISTEN_S)
        if reader not in ready:
            if ready and not reader.poll():  # it exited, and said nothing more
                return None, None
            continue
        try:
            kind, payload = reader.recv()
        except EOFError:
            return None, None
        watch.heard()
        if kind == "record":
            return payload, None
        _heard(kind, payload, watch, on_progress, seat, down)


def _heard(kind: str, payload, watch: Watch, on_progress, seat: Seat | None, down: _Granting | None) -> None:
    if kind == "progress":
        watch.progress(*payload)
        on_progress(*payload)
    elif kind == "probed":
        watch.probed = json.loads(payload)
    elif kind == "window":
        watch.window(payload)
    elif kind == "ready" and seat is not None:
        watch.wait_turn()  # before the seat: it may grant the turn at once
        on_progress(WAITING, watch.done, watch.total)  # the display's, not the watch's: it is no phase of the cell's
        seat.ready(payload, down)
    elif kind == "turn" and seat is not None:
        watch.wait_turn()
        watch.window(payload)
        on_progress(WAITING, watch.done, watch.total)
        seat.turn_done(payload)


class _Granting:
    """The pipe down to a cell side by side: each word the run sends (a turn, the release) lets the
    cell go on, so its watch runs again from then, and its progress is its phase's again (a slow
    cell's first step of a turn would otherwise show it waiting for seconds after it had the turn).
    From the thread of whichever cell handed the device over: `on_progress` must be thread-safe."""

    def __init__(self, down: Connection, watch: Watch, on_progress: Callable[[str, int, int], None]) -> None:
        self.down, self.watch, self.on_progress = down, watch, on_progress

    def send(self, word: object) -> None:
        self.watch.granted()
        self.on_progress(self.watch.phase, self.watch.done, self.watch.total)
        self.down.send(word)


def _stop_cell(process: multiprocessing.process.BaseProcess, recorded: bool) -> None:
    """The cell's process and its group ended. One that sent its record leaves by itself (within
    cell_process.LEAVE_LIMIT_S); one stopped or stalled gets SIGTERM (and SIGCONT: a paused process
    can't act on it), STOP_TIMEOUT_S to exit, then SIGKILL. Then whatever its code left in its group."""
    if recorded:
        process.join(LEAVE_LIMIT_S)
    for signum, grace_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, None)):
        if not process.is_alive():
            break
        for each in (signum, signal.SIGCONT):
            signal_group(process.pid, each)
            signal_all([process.pid], each)  # in case it had not made its group yet
        process.join(grace_s)
    signal_group(process.pid, signal.SIGKILL)


def _died(code: int | None, log_path: Path) -> str:
    logged = log_path.exists() and log_path.stat().st_size > 0
    where = f"see {log_path}" if logged else "it died before writing its log: see the suite's own output"
    return f"worker process died ({_exit_description(code)}); {where}"


def _exit_description(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = ", often the out-of-memory killer" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"
