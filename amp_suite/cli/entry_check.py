"""`amp-suite run`'s check of a user's entry, before any cell: the entry is imported and called once,
as a cell would, in a child process (amp_suite.workloads.custom's main), so that the user's code
never runs in the process that keeps the records.

The user's code may hang, fork, exit 0 or die by a signal. So the child runs in a session of its own,
within a stated limit (ENTRY_CHECK_S, or AMP_SUITE_ENTRY_CHECK_S); when it ends, when the limit
passes and when amp-suite is stopped (SIGINT, SIGTERM, SIGHUP), its whole process group is killed,
the entry's own children with it; and if amp-suite itself is killed, the child ends its group
(it watches its parent). Every way the check ends is one line: the entry's own reason, the signal
that killed it, or an exit before the entry returned.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any

from amp_suite.cli.common import fail
from amp_suite.config import ConfigError
from amp_suite.execution.process_tree import signal_group
from amp_suite.signals import signal_of, stop_on_signals
from amp_suite.text import printable

ENTRY_CHECK_S = 600.0  # building a large model on the CPU takes a while; a hang must still end
LIMIT_VARIABLE = "AMP_SUITE_ENTRY_CHECK_S"
MAX_LIMIT_S = 24 * 3600
OUTPUT_KEPT = 64 << 10  # the end of the entry's output, for its last line when it dies without a verdict
REASON_MAX = 500


def entry_check_limit() -> float:
    """The check's limit in seconds: AMP_SUITE_ENTRY_CHECK_S, else ENTRY_CHECK_S."""
    text = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not text:
        return ENTRY_CHECK_S
    try:
        limit = float(text)
    except ValueError:
        limit = -1.0
    if not 0 < limit <= MAX_LIMIT_S:
        raise ConfigError(f"{LIMIT_VARIABLE}: give the entry check's limit in seconds, more than 0 and at most"
                          f" {MAX_LIMIT_S} (got {text[:40]!r})")  # fmt: skip
    return limit


def check_entry(entry: str, args: dict[str, Any], limit_s: float) -> str | None:
    """Import and call the entry in a child process; None where it builds a workload, else why not."""
    with tempfile.TemporaryDirectory(prefix="amp-suite-entry-check-") as folder:
        request, verdict = Path(folder) / "request.json", Path(folder) / "verdict.json"
        request.write_text(json.dumps({"entry": entry, "args": args, "parent_pid": os.getpid()}))
        command = [sys.executable, "-m", "amp_suite.workloads.custom", str(request), str(verdict)]
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        output = _Tail(child.stdout)
        try:
            with stop_on_signals():
                returncode = _waited(child, limit_s)
        except KeyboardInterrupt as exc:
            stopped_by = signal_of(exc)
            message = f"stopped by {stopped_by.name} during the check of entry {entry}; no cell ran, nothing written"
            raise fail(message[:REASON_MAX], 128 + stopped_by) from None
        finally:
            _end_group(child)
        return _reason(entry, returncode, _verdict(verdict), output.read(), limit_s)


def _waited(child: subprocess.Popen, limit_s: float) -> int | None:
    """The child's exit code, or None where it was still running at the limit."""
    try:
        return child.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        return None


def _end_group(child: subprocess.Popen) -> None:
    """Kill what is left of the check's session: the child, if it still runs, and anything the
    entry started (a forked process, say, that would otherwise hold on)."""
    signal_group(child.pid, signal.SIGKILL)
    child.wait()


class _Tail:
    """The last OUTPUT_KEPT bytes of the child's output, read on a thread so that a child that
    writes much never blocks on a full pipe; kept as bytes (they may not be UTF-8)."""

    def __init__(self, stream) -> None:
        self._chunks: deque[bytes] = deque()
        self._reader = threading.Thread(target=self._drain, args=(stream,), name="amp-suite-entry-output", daemon=True)
        self._reader.start()

    def _drain(self, stream) -> None:
        size = 0
        with stream:
            while chunk := stream.read1(1 << 16):
                self._chunks.append(chunk)
                size += len(chunk)
                while size - len(self._chunks[0]) >= OUTPUT_KEPT:
                    size -= len(self._chunks.popleft())

    def read(self) -> bytes:
        """What was kept, once the pipe closed (or a second passed: a process that escaped the
        check's session may hold it open)."""
        self._reader.join(timeout=1)
        return b"".join(list(self._chunks))


def _verdict(path: Path) -> dict[str, Any] | None:
    try:
        verdict = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # the check died before it could say
    return verdict if isinstance(verdict, dict) and "reason" in verdict else None


def _reason(entry: str, returncode: int | None, verdict: dict | None, output: bytes, limit_s: float) -> str | None:
    """The one line the check ends with: the entry's own reason, or how its process ended."""
    if verdict is not None and returncode is not None:
        return None if verdict["reason"] is None else _one_line(str(verdict["reason"]))
    if returncode is None:
        reason = (f"entry {entry}: entry check still running after {limit_s:g} s: stopped, with every process"
                  f" it started ({LIMIT_VARIABLE} sets the limit)")  # fmt: skip
    elif returncode < 0:
        reason = f"entry {entry}: the entry check was killed by {_signal_name(-returncode)}"
    else:
        reason = f"entry {entry} ended its process (exit code {returncode}) before it returned (os._exit?)"
    last = _last_line(output)
    return _one_line(reason + (f"; its last output: {last}" if last else ""))


def _one_line(text: str) -> str:
    """Printable on any terminal: one line, bounded, and UTF-8 (the user's exception text may hold
    lone surrogates, from bytes that were not)."""
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    return printable(" ".join(text.split()))[:REASON_MAX]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_line(output: bytes) -> str:
    lines = [line.strip() for line in output.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
