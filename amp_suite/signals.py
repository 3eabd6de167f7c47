"""SIGTERM, SIGHUP and Ctrl-C stop a run cleanly, and never in the middle of a write.

`docker stop`, Kubernetes and `timeout` send SIGTERM, a closed terminal SIGHUP. Python turns
only SIGINT into an exception; the others would end the process on the spot and leave the
tracker's runs open forever. Inside `stop_on_signals()` all three raise `Stopped`, a
KeyboardInterrupt, so every cleanup written for Ctrl-C runs for them too; the exit code is
128 + the signal's number.

A second stop (docker stop and Kubernetes send SIGTERM, then more; a user presses Ctrl-C again)
does not interrupt the first one's cleanup, which records what the cells measured: it calls the
`escalate` given to `stop_on_signals()` (the run kills every process below it at once, so nothing
waits on them), and the process exits within SECOND_STOP_EXIT_S whatever the cleanup still does,
with the first signal's exit code.

`signals_held()` defers that exception to the end of a block that must not be cut in half (a
results line, an SQLite commit). Python runs signal handlers in the main thread between
bytecodes, whichever thread the kernel delivered the signal to, so a flag checked by the
handler is what holds them, not the thread's signal mask.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SECOND_STOP_EXIT_S = 10.0


class Stopped(KeyboardInterrupt):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State:
    held = 0  # depth of signals_held() blocks
    pending: int | None = None  # a signal that arrived while held
    stopping: int | None = None  # the first signal, being handled; later ones escalate, once
    escalate: Callable[[], None] | None = None
    escalated = False


def signal_of(interrupt: KeyboardInterrupt) -> signal.Signals:
    return signal.Signals(getattr(interrupt, "signum", signal.SIGINT))


def _handler(signum: int, frame: object) -> None:
    if _State.stopping:
        _second_stop(_State.stopping)  # the first stop's cleanup is not cut short: it is hurried
        return
    if _State.held:
        _State.pending = _State.pending or signum
        return
    _stop(signum)


def _stop(signum: int) -> None:
    _State.stopping = signum
    atexit.register(_ignore_later_stops)  # registered last, so it runs first
    raise Stopped(signum)


def _ignore_later_stops() -> None:
    """At exit after a stop. Python's finalization puts the handlers it installed back to the default
    action, under which a late second SIGTERM (docker stop and Kubernetes send more) would end the
    process by that signal rather than with the first's exit code. atexit runs once the threads are
    joined, the run's cleanup done: later stops are ignored."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _second_stop(first: int) -> None:
    if _State.escalated:
        return
    _State.escalated = True
    if _State.escalate is not None:
        _State.escalate()
    deadline = threading.Timer(SECOND_STOP_EXIT_S, _exit_now, args=(128 + first,))
    deadline.daemon = True
    deadline.start()


def _exit_now(code: int) -> None:
    name = signal.Signals(code - 128).name
    sys.stderr.write(f"amp-suite: stopped by {name}; a second stop ended the cleanup after {SECOND_STOP_EXIT_S:g} s\n")
    sys.stderr.flush()
    os._exit(code)


@contextmanager
def stop_on_signals(escalate: Callable[[], None] | None = None) -> Iterator[None]:
    """`escalate`: what a second stop signal does at once (the first raises Stopped)."""
    previous = {signum: signal.signal(signum, _handler) for signum in STOP_SIGNALS}
    _State.stopping, _State.pending, _State.escalate, _State.escalated = None, None, escalate, False
    try:
        yield
    finally:
        for signum, action in previous.items():
            # Once stopping, the process is on its way out with the first signal's exit code: a
            # second Ctrl-C or SIGTERM during the last cleanup must not kill it by that signal, only
            # hurry it (the handler stays, and escalates).
            signal.signal(signum, _handler if _State.stopping else action)


@contextmanager
def signals_held() -> Iterator[None]:
    """A stop signal that arrives inside the block takes effect when it ends."""
    _State.held += 1
    try:
        yield
    finally:
        _State.held -= 1
        if not _State.held and _State.pending is not None and not _State.stopping:
            signum, _State.pending = _State.pending, None
            _stop(signum)


def stop_with_parent(signum: int = signal.SIGTERM) -> None:
    """Linux: deliver `signum` to this process when its parent exits (prctl PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)
