"""JSON Lines files that survive what goes wrong: whole lines or nothing; unreadable lines skipped.

An append adds one complete line or leaves the file exactly as it was. Stop signals wait until
it has written (a handler that raises mid-write would cut the line), and a write that fails
part-way, as on a full disk, is cut back to the old size before the error is raised. Readers
skip any line that is cut off, not UTF-8 or not a JSON object, and say how many they skipped.
No torch here.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from amp_suite.signals import signals_held


class LineWriteError(OSError):
    """A line could not be appended; the file is as it was before the attempt."""


def append_line(path: Path, text: str) -> None:
    """Append `text` (one JSON document, no newline) as a line, flushed to disk."""
    data = text.encode() + b"\n"
    with signals_held():
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise LineWriteError(exc.errno, f"cannot open {path} for writing: {exc.strerror}") from exc
        try:
            _write_whole(fd, data, path)
        finally:
            os.close(fd)


def _write_whole(fd: int, data: bytes, path: Path) -> None:
    size = os.lseek(fd, 0, os.SEEK_END)
    if size and os.pread(fd, 1, size - 1) != b"\n":
        data = b"\n" + data  # never extend a line a crash left unterminated
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)  # a full disk may only show itself here
    except OSError as exc:
        os.ftruncate(fd, size)  # shrinking needs no free space
        raise LineWriteError(exc.errno, f"cannot append to {path}: {exc.strerror}") from exc


def json_safe(value: Any) -> Any:
    """`value` with non-finite floats as the strings "NaN", "Infinity", "-Infinity": the dialect
    of every JSON file the suite writes (JSON itself has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def read_objects(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every JSON object in the file, and how many non-blank lines could not be read as one."""
    try:
        raw_lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return [], 0
    objects, unreadable = [], 0
    for raw in raw_lines:
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            unreadable += 1
            continue
        if isinstance(value, dict):
            objects.append(value)
        else:
            unreadable += 1
    return objects, unreadable
