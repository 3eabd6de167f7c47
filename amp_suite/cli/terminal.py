"""The terminal as the command finds it: a size it may lie about, and streams that may be closed,
full or gone. Neither may stop a command's work, nor silence its error lines.

A command's words are the least of what it does: a run's records, report and MLflow runs must all
be finished when its stdout is closed (`>&-`), full (`>/dev/full`) or a pipe whose reader left
(`| head`). Its consoles therefore write through a `TerminalStream`, which keeps the first
failure, drops what follows and lets the work go on; the command then ends with one line on
stderr and exit 5 (amp_suite.cli.main), where it would have exited 0.
"""

from __future__ import annotations

import os
import sys

SIZE_VARIABLES = ("COLUMNS", "LINES")


def settle_terminal_size() -> None:
    """COLUMNS=0 (or LINES=0) makes rich render every line 0 cells wide: nothing at all is printed,
    error lines and Typer's help included. A size of 0 says nothing about the terminal: it is dropped
    for every console (rich reads these variables itself), which then asks the terminal or takes
    its default."""
    for name in SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) == 0:
            del os.environ[name]


class TerminalStream:
    """sys.stdout or sys.stderr, looked up at each write as rich does (tests and rich's own progress
    display swap them), for a console: the first failure to write is kept in `lost`, and nothing
    more is tried. Text the stream's encoding lacks (an ASCII-only locale) is written escaped."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lost: OSError | None = None

    @property
    def stream(self):
        stream = getattr(sys, self.name)
        return getattr(stream, "rich_proxied_file", stream)  # rich's progress display proxies stdout

    def write(self, text: str) -> int:
        self._try(lambda stream: stream.write(text), text)
        return len(text)

    def flush(self) -> None:
        self._try(lambda stream: stream.flush(), "")

    def isatty(self) -> bool:
        try:
            return bool(self.stream is not None and self.stream.isatty())
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        if self.stream is None:
            raise OSError(9, "Bad file descriptor")
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def _try(self, action, text: str) -> None:
        if self.lost is not None:
            return
        stream = self.stream
        try:
            if stream is None:  # started with the descriptor closed: Python has no stream for it
                raise OSError(9, "Bad file descriptor")
            try:
                action(stream)
            except UnicodeEncodeError:
                escaped = text.encode(self.encoding, "backslashreplace").decode(self.encoding)
                stream.write(escaped)
        except (OSError, ValueError) as exc:  # ValueError: written after the stream was closed
            self.lost = exc if isinstance(exc, OSError) else OSError(9, str(exc))
            _discard_pending(stream)

    def lost_reason(self) -> str | None:
        """Why the output was lost (None: it was not)."""
        if self.lost is None:
            return None
        return self.lost.strerror or str(self.lost)


def _discard_pending(stream) -> None:
    """Point the descriptor at /dev/null: what Python still holds for it is flushed there at exit,
    instead of failing again with 'Exception ignored' and exit code 120."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a descriptor of this process (a test's captured stream): nothing to flush at exit
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, descriptor)
    finally:
        os.close(null)
