"""Run each cell in a fresh process, so allocator state and global flags never leak between cells.

Processes are forked from a forkserver that has already imported torch (and the matrix's
workload modules) but never touched CUDA: each cell starts clean in milliseconds instead of
paying seconds of imports. The child streams throttled progress and finally its record through
a pipe; its stdout/stderr go to the cell's log file. A child that dies without a record (killed
for memory, segfault) is recorded as failed by the parent. A child whose parent dies (the
forkserver exits when the suite does, even on SIGKILL) is stopped too, so a killed run never
leaves a cell occupying the device.

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
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Protocol

from amp_suite.config import CellSpec
from amp_suite.records.finish import finished
from amp_suite.records.jsonl import LineWriteError, json_safe
from amp_suite.records.results import CellRecord
from amp_suite.records.rundir import append_to
from amp_suite.signals import stop_with_parent

PROGRESS_INTERVAL_S = 1.0  # at most one progress message a second leaves the child: the display refreshes at 1 Hz
STOP_TIMEOUT_S = 5.0  # a terminated cell gets this long to exit cleanly before it is killed


Context = multiprocessing.context.BaseContext


@dataclass(frozen=True)
class Placement:
    """Where a cell runs when it shares the box: the GPUs it sees, and the CPU threads it may use."""

    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES for the cell: "2", or "0,1" for a DDP cell
    threads: int | None = None  # torch's intra-op threads; None keeps torch's default (every core)


UNPLACED = Placement()  # the whole box: every GPU, every core


class Seat(Protocol):
    """A cell's place side by side with the other cells of its comparison (execution.side_by_side):
    what the cell says on its pipe, passed on. `down` is the pipe that carries the run's word to it."""

    def ready(self, memory: dict[str, float], down: Connection) -> None: ...
    def turn_done(self, rate: float | None) -> None: ...
    def left(self) -> None: ...


class Cancelled(Exception):
    """The run is stopping: the cell's process was stopped and it has no record."""


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
    target: Callable[[str, Connection, str, dict], None] | None = None,
    placement: Placement = UNPLACED,
    cancelled: threading.Event | None = None,
    seat: Seat | None = None,
) -> CellRecord:
    """Run the cell in a child process; `target` replaces the child's entry point in tests.
    `cancelled`: for a cell run from a thread (the main thread gets signals, this one does not):
    once set, the cell is stopped and Cancelled raised. `seat`: the cell takes turns with others."""
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # the run folder was removed or replaced under the run: stop it as a failed write
        raise LineWriteError(exc.errno, f"cannot create {log_path.parent}: {exc.strerror}") from exc
    reader, writer = context.Pipe(duplex=False)
    down, down_writer = context.Pipe(duplex=False) if seat is not None else (None, None)
    args = (spec.model_dump_json(), writer, str(log_path), asdict(placement), down)
    process = context.Process(target=target or _child_main, args=args)
    process.start()
    writer.close()  # the child holds the only writer now, so its exit means EOF here
    if down is not None:
        down.close()
    record, probed = None, {}
    try:
        while True:
            try:
                kind, payload = _receive(reader, cancelled)
            except EOFError:
                break
            if kind == "progress":
                on_progress(*payload)
            elif kind == "probed":
                probed = json.loads(payload)
            elif kind == "ready" and seat is not None:
                seat.ready(payload, down_writer)
            elif kind == "turn" and seat is not None:
                seat.turn_done(payload)
            else:
                record = CellRecord.model_validate_json(payload)
        process.join()
    finally:
        if process.is_alive():  # interrupted: do not leave a cell running on the device
            process.terminate()
            process.join(timeout=STOP_TIMEOUT_S)
            if process.is_alive():  # stuck in native code that never returns to Python
                process.kill()
                process.join()
        reader.close()
        if seat is not None:
            seat.left()  # its turns, if any are left, pass to the others
            down_writer.close()
    if record is None:
        logged = log_path.exists() and log_path.stat().st_size > 0
        where = f"see {log_path}" if logged else "it died before writing its log: see the suite's own output"
        reason = f"worker process died ({_exit_description(process.exitcode)}); {where}"
        record = CellRecord.for_spec(spec, "failed", reason, **probed)  # where it ran, if it got that far
    return finished(record, {"worker": {"log_path": str(log_path)}})


def _receive(reader: Connection, cancelled: threading.Event | None) -> tuple[str, object]:
    if cancelled is not None:
        while not reader.poll(0.1):
            if cancelled.is_set():
                raise Cancelled()
    return reader.recv()


def _exit_description(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = ", often the out-of-memory killer" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


class _PipeTurns:
    """A cell's turns side by side (amp_suite.cell.turns.Turns), over its pipes: what it says goes
    up the pipe of its progress and record, the run's word to go on comes down a pipe of its own."""

    shared = True

    def __init__(self, up: Connection, down: Connection) -> None:
        self.up, self.down = up, down
        self._stopped: dict[str, object] | None = None

    def ready(self, memory: dict[str, float]) -> None:
        self.up.send(("ready", memory))

    def take(self) -> None:
        self.down.recv()  # blocks, without spinning: the device is another cell's

    def give(self, rate: float | None = None) -> None:
        self.up.send(("turn", rate))

    def again(self) -> bool:
        word = self.down.recv()  # "go", or ("release", how the timing stopped)
        if word == "go":
            return True
        self._stopped = word[1]
        return False

    @property
    def stopped(self) -> dict[str, object] | None:
        return self._stopped


class _ThrottledProgress:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.last_sent = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last_sent >= PROGRESS_INTERVAL_S:
            self.last_sent = now
            self.connection.send(("progress", (phase, done, total)))


def _thread_lock_for_progress_bars() -> None:
    """datasets loads files through tqdm, whose default lock is a multiprocessing one: a named
    semaphore that a cell stopped while loading leaves for the resource tracker to report as
    leaked, on the user's terminal. A cell is one process; a thread lock is all it needs."""
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _place(placement: dict) -> None:
    """Before anything touches CUDA (the forkserver never did): CUDA reads the variable once, at init."""
    if placement["visible_devices"] is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = placement["visible_devices"]
    if placement["threads"] is not None:
        import torch

        torch.set_num_threads(placement["threads"])


def _child_main(
    spec_json: str, connection: Connection, log_path: str, placement: dict, down: Connection | None = None
) -> None:
    # Stopped by the parent (an interrupted run) or with it: exit through Python, so that what
    # the cell registered with multiprocessing's resource tracker is released, not reported leaked.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    stop_with_parent()
    _place(placement)
    _thread_lock_for_progress_bars()
    with append_to(Path(log_path)) as log:  # never through a link: the run checked logs/, this holds it to that
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)

    from amp_suite.cell.run import run_cell  # preloaded in the forkserver: no import cost here
    from amp_suite.cell.turns import ALONE

    def probed(where: dict) -> None:
        connection.send(("probed", json.dumps(json_safe(where))))

    turns = ALONE if down is None else _PipeTurns(connection, down)
    record = run_cell(CellSpec.model_validate_json(spec_json), _ThrottledProgress(connection), probed, turns)
    connection.send(("record", record.model_dump_json()))
    connection.close()
