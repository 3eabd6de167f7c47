"""SIGTERM and SIGHUP stop a run the way Ctrl-C does.

`docker stop`, Kubernetes and `timeout` send SIGTERM, a closed terminal SIGHUP. Python turns
only SIGINT into an exception (KeyboardInterrupt); the others would end the process on the spot
and leave the tracker's runs open forever. Here they raise `Stopped`, a KeyboardInterrupt, so
every cleanup written for Ctrl-C runs for them too. The exit code is 128 + the signal's number.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(interrupt: KeyboardInterrupt) -> signal.Signals:
    return signal.Signals(getattr(interrupt, "signum", signal.SIGINT))


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise Stopped in the main thread, once: a second one
    while the first is being handled is ignored, so the cleanup itself is not cut short."""

    def handler(signum: int, frame: object) -> None:
        for other in STOP_SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)
