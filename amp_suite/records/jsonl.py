"""JSON Lines files that survive what goes wrong: whole lines or nothing; unreadable lines skipped.

An append adds one complete line or leaves the file exactly as it was. Stop signals wait until
it has written (a handler that raises mid-write would cut the line), and a write that fails
part-way, as on a full disk, is cut back to the old size before the error is raised. Readers
skip any line that is cut off, not UTF-8, not a JSON object, longer, more deeply nested or with
more values than any record, and say how many they skipped; a path that is not a regular file is refused.
No torch here.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from amp_suite.files import bounded_lines
from amp_suite.signals import signals_held

# A record is a few kB to a few MB (long loss curves, a dtype audit); nothing the suite writes
# nests deeper than a handful of levels. Lines past either bound are skipped and counted.
MAX_LINE_BYTES = 64 << 20
MAX_DEPTH = 32
# Nor does any record hold more values than its per-step series (records.results.MAX_CURVE_POINTS
# each: the loss and the loss scale) and a few hundred fields. Parsing costs ~32 bytes a number,
# so a 64 MiB line of short numbers took ~700 MB to find too long: a line with more separators
# than that is skipped before it is parsed.
MAX_VALUES = 4_200_000


class LineWriteError(OSError):
    """A line could not be appended (or the run folder it goes in written); the file is as it was."""


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
    """Every JSON object in the file, and how many non-blank lines could not be read as one.

    RefusedFile (one line, exit 2 at the CLI) if the path is there but is not a regular file."""
    objects = list(each_object(path))
    return [value for value in objects if value is not None], objects.count(None)


def each_object(path: Path) -> Iterator[dict[str, Any] | None]:
    """The file's JSON objects one at a time, None for each non-blank line that is not one: a
    reader that keeps only what it makes of each holds one line's worth at a time, not the file's."""
    for raw in bounded_lines(path, MAX_LINE_BYTES):
        if raw is None:
            yield None
        elif raw.strip():
            yield _object_of(raw)


def _object_of(raw: bytes) -> dict[str, Any] | None:
    """The line's JSON object, or None for anything else: cut off, not UTF-8, not an object, or
    nested deeper than any record is (a line of 10^5 brackets makes the parser recurse out), or
    holding more values than any record does."""
    if raw.count(b",") >= MAX_VALUES:
        return None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or _depth(value) > MAX_DEPTH:
        return None
    return value


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in `value`, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest
