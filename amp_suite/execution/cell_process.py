"""The cell's side of a worker process (amp_suite.execution.worker): what runs in the child, from
the fork to its exit. No torch here: the cell's modules load in the child, from the forkserver's.

The child leads a process group of its own and adopts its orphans (execution.process_tree), says
what it does up one pipe (a heartbeat from a thread of its own, progress, each timed window's rate,
its record), and leaves through `leave()`: every process below it ended, multiprocessing's
finalizers run (what it registered with the resource tracker is released, not reported leaked),
then os._exit, whatever threads the user's code left running.
"""

from __future__ import annotations

import json
import multiprocessing.util
import os
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from amp_suite.config import CellSpec
from amp_suite.execution.process_tree import become_subreaper, end_descendants, lead_own_group
from amp_suite.records.jsonl import json_safe
from amp_suite.records.rundir import append_to
from amp_suite.signals import stop_with_parent

PROGRESS_INTERVAL_S = 1.0  # at most one progress message a second leaves the child: the display refreshes at 1 Hz
LEAVE_LIMIT_S = 10.0  # leaving (finalizers, flushing the log) takes no longer, whatever the user's code holds
PARENT_GONE = 1


class Up:
    """The pipe up to the parent, shared by the cell's thread and its heartbeat's: one message at
    a time (a record is larger than the pipe's atomic write, and would interleave with a beat)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.lock = threading.Lock()

    def send(self, message: tuple[str, object]) -> None:
        with self.lock:
            self.connection.send(message)


def child_main(
    spec_json: str,
    connection: Connection,
    log_path: str,
    placement: dict,
    down: Connection | None = None,
    beat_s: float | None = None,
) -> None:
    """Run the cell, send its record, leave; never returns (`leave`)."""
    code = 1
    try:
        _become_a_cell()
        up = Up(connection)
        if beat_s is not None:
            threading.Thread(target=_heartbeat, args=(up, beat_s), name="amp-suite-heartbeat", daemon=True).start()
        _place(placement)
        _thread_lock_for_progress_bars()
        _log_to(Path(log_path))
        _run(spec_json, up, down)
        code = 0
    except SystemExit as exc:  # SIGTERM: the parent stopped it
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()  # to the cell's log; the parent records it as died, with the log's path
    finally:
        leave(code)


def _become_a_cell() -> None:
    # Stopped by the parent (an interrupted run, a stall): unwind through Python, then `leave`.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    lead_own_group()
    become_subreaper()
    stop_with_parent()  # the forkserver's end: a second line, after the heartbeat's broken pipe


def _run(spec_json: str, up: Up, down: Connection | None) -> None:
    from amp_suite.cell.run import run_cell  # preloaded in the forkserver: no import cost here

    def probed(where: dict) -> None:
        up.send(("probed", json.dumps(json_safe(where))))

    turns = PipeAlone(up) if down is None else PipeTurns(up, down)
    record = run_cell(CellSpec.model_validate_json(spec_json), ThrottledProgress(up), probed, turns)
    up.send(("record", record.model_dump_json()))


def leave(code: int) -> None:
    """End every process below this one, run multiprocessing's finalizers, flush, and exit now:
    the user's non-daemon threads are not waited for. From any thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second stop must not cut the way out short
    backstop = threading.Timer(LEAVE_LIMIT_S, os._exit, args=(code,))
    backstop.daemon = True
    backstop.start()
    try:
        end_descendants()
        multiprocessing.util._exit_function()  # what Process._bootstrap runs at a child's end
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _heartbeat(up: Up, every_s: float) -> None:
    """Say the process is alive, every `every_s`; once the parent is gone (the pipe is broken),
    nobody will read the record: end the cell."""
    while True:
        time.sleep(every_s)
        try:
            up.send(("beat", None))
        except OSError:
            leave(PARENT_GONE)


def _log_to(path: Path) -> None:
    with append_to(path) as log:  # never through a link: the run checked logs/, this holds it to that
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


class PipeTurns:
    """A cell's turns side by side (amp_suite.cell.turns.Turns), over its pipes: what it says goes
    up the pipe of its progress and record, the run's word to go on comes down a pipe of its own."""

    shared = True

    def __init__(self, up: Up, down: Connection) -> None:
        self.up, self.down = up, down
        self._stopped: dict[str, object] | None = None

    def ready(self, memory: dict[str, float]) -> None:
        self.up.send(("ready", memory))

    def take(self) -> None:
        self.down.recv()  # blocks, without spinning: the device is another cell's

    def give(self, rate: float | None = None) -> None:
        self.up.send(("turn", rate))  # the parent keeps the rate: a stopped run records the windows

    def again(self) -> bool:
        word = self.down.recv()  # "go", or ("release", how the timing stopped)
        if word == "go":
            return True
        self._stopped = word[1]
        return False

    @property
    def stopped(self) -> dict[str, object] | None:
        return self._stopped


class PipeAlone:
    """A cell that takes turns with nobody (amp_suite.cell.turns.Alone), whose windows' rates still
    go up as each ends: a run stopped or stalled records the windows its cells finished."""

    shared = False
    stopped = None

    def __init__(self, up: Up) -> None:
        self.up = up

    def ready(self, memory: dict[str, float]) -> None:
        pass

    def take(self) -> None:
        pass

    def give(self, rate: float | None = None) -> None:
        if rate is not None:
            self.up.send(("window", rate))

    def again(self) -> bool:
        return False


class ThrottledProgress:
    """At most a message a second, but every new phase at once: the watchdog judges by phase."""

    def __init__(self, up: Up) -> None:
        self.up = up
        self.last_sent = 0.0
        self.phase: str | None = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != self.phase or done == total or now - self.last_sent >= PROGRESS_INTERVAL_S:
            self.last_sent, self.phase = now, phase
            self.up.send(("progress", (phase, done, total)))


def _thread_lock_for_progress_bars() -> None:
    """datasets loads files through tqdm, whose default lock is a multiprocessing one: a named
    semaphore that a cell stopped while loading leaves for the resource tracker to report as
    leaked, on the user's terminal. A cell is one process; a thread lock is all it needs."""
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _place(placement: dict) -> None:
    """Before anything touches the device (the forkserver never did): CUDA reads its visible-devices
    variable once, at init. The parent named the variable, its device's backend's (worker.Placement)."""
    if placement["visible_devices"] is not None and placement["variable"] is not None:
        os.environ[placement["variable"]] = placement["visible_devices"]
    if placement["threads"] is not None:
        import torch

        torch.set_num_threads(placement["threads"])
