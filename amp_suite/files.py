"""Opening a file the suite reads (records, invocations, matrices, reference data), and writing
one whole. No torch here.

Whatever a path names is checked before a byte is read: a symlink to /dev/zero would grow
without end, a FIFO would block forever, a folder would raise. Only regular files are opened,
with O_NONBLOCK so that even the open of a FIFO returns at once, and they are read within a
bound: whole files up to a size, JSON Lines one bounded line at a time, so that a file of any
size costs at most one line's memory to skip through.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from amp_suite.errors import ConfigError
from amp_suite.paths import shown

CHUNK = 1 << 20
KINDS = {
    stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
}  # fmt: skip


class RefusedFile(ConfigError):
    """A path that can't be read as the suite's file: not a regular file, too large, unreadable."""


@contextmanager
def open_regular(path: Path) -> Iterator[BinaryIO | None]:
    """The file opened for reading, or None when nothing is there; RefusedFile for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:  # a loop of symlinks, a name too long, no permission
        raise RefusedFile(f"{shown(path)}: cannot read ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise RefusedFile(f"{shown(path)}: is {kind}, not a regular file")
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_limited(path: Path, limit: int) -> bytes | None:
    """The whole file (None if missing); RefusedFile past `limit` bytes."""
    with open_regular(path) as handle:
        if handle is None:
            return None
        data = _read(handle, path, limit + 1)
    if len(data) > limit:
        raise RefusedFile(f"{shown(path)}: larger than {limit >> 20} MiB")
    return data


def bounded_lines(path: Path, max_line: int) -> Iterator[bytes | None]:
    """The file's lines without their ends; None stands for a line longer than `max_line`, which
    is skipped without being held in memory. Nothing at all for a missing file."""
    with open_regular(path) as handle:
        if handle is None:
            return
        while True:
            line = _readline(handle, path, max_line + 1)
            if not line:
                return
            if len(line) > max_line and not line.endswith(b"\n"):
                while (rest := _readline(handle, path, CHUNK)) and not rest.endswith(b"\n"):
                    pass  # the rest of an over-long line: read through, never kept
                yield None
            else:
                yield line.rstrip(b"\r\n")


def _read(handle: BinaryIO, path: Path, size: int) -> bytes:
    return _reading(handle.read, path, size)


def _readline(handle: BinaryIO, path: Path, size: int) -> bytes:
    return _reading(handle.readline, path, size)


def _reading(read, path: Path, size: int) -> bytes:
    try:
        return read(size)
    except OSError as exc:  # e.g. EIO from a failing disk
        raise RefusedFile(f"{shown(path)}: cannot read ({exc.strerror})") from None


def write_whole(path: Path, data: bytes) -> Path:
    """`data` as the file at `path`, whole or not at all: written beside it, then moved over it."""
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_bytes(data)
        partial.replace(path)  # a reader never sees half a file
    except OSError:
        partial.unlink(missing_ok=True)  # e.g. a full disk: no half-written file is left behind
        raise
    return path
