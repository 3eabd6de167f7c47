"""The --out folder of a run: results.jsonl, invocations.jsonl, logs/, the embedded MLflow store,
and a lock so that one amp-suite process writes it at a time. No torch here.

The lock is an flock on `.amp-suite.lock`: the kernel drops it when its process dies, however it
dies, so whoever takes it next knows that every invocation still open in invocations.jsonl was
killed. The lock file also says who holds it, for the message the second process prints.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from amp_suite.config import ConfigError
from amp_suite.files import open_regular
from amp_suite.paths import check_path, shown
from amp_suite.records.invocations import InvocationLog
from amp_suite.records.results import ResultsFile

LOCK_FILE = ".amp-suite.lock"
# What a run writes into its folder: anything else under these names (a symlink to /dev/full, a
# folder named results.jsonl) would hang, flood or crash the run later, so it is refused up front.
# Nor is any of them a symbolic link: a copied folder whose mlflow.db, logs/ or mlartifacts/ leads
# elsewhere would write into the original, or outside the folder. The same holds for every file in
# logs/ (a cell's log is appended to by its run and uploaded by sync) and under mlartifacts/.
EXPECTED_ENTRIES = {
    "results.jsonl": "file", "invocations.jsonl": "file", "mlflow.db": "file", LOCK_FILE: "file", "logs": "folder",
    "report": "folder", "report/figures": "folder", "mlartifacts": "folder", "prediction.json": "file",
}  # fmt: skip

LINKED = "is a symbolic link; the suite writes only inside the folder"


class OutDirBusy(ConfigError):
    """Another amp-suite process holds the folder."""


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.results = ResultsFile(path / "results.jsonl")
        self.invocations = InvocationLog(path / "invocations.jsonl")
        self.prediction = path / "prediction.json"  # `amp-suite predict --results`: the report shows it

    def log_path(self, cell_id: str) -> Path:
        """Where a cell's log is written: named for the cell, inside logs/ whatever the id holds."""
        return self.path / "logs" / (cell_id.replace("/", "_") + ".log")

    def cell_log(self, cell_id: str) -> Path | None:
        """The cell's log to upload, if logs/ holds it as a plain file. Never a path a record names:
        a record's log_path is its word, and a folder someone hands over can say /etc/shadow."""
        path = self.log_path(cell_id)
        return path if is_plain_file(path) else None

    def check_syncable(self, command: str = "sync") -> None:
        """One ConfigError line if `sync` (or `ui`) can't read the folder's records (results.jsonl
        or invocations.jsonl there but not a regular file: a symlink to /dev/zero or a FIFO would
        flood or hang the reader) or would write through its entries (the lock, its own store,
        the logs)."""
        for path in (self.results.path, self.invocations.path):
            with open_regular(path):
                pass
        _check_entries(self.path, f"{command} {shown(self.path)}", writing=False)

    @staticmethod
    def check_writable(path: Path, option: str = "--out") -> None:
        """Fail with one line if `path` can't become a run folder, before anything starts."""
        check_path(path, option)  # loops, names too long, /proc and the like
        label = f"{option} {shown(path)}"
        try:
            if path.exists() and not path.is_dir():
                raise ConfigError(f"{label}: exists and is not a folder")
            existing = next(parent for parent in (path, *path.parents) if parent.exists())
            if not existing.is_dir():
                raise ConfigError(f"{label}: {shown(existing)} is not a folder")
            if not os.access(existing, os.W_OK | os.X_OK):
                raise ConfigError(f"{label}: {shown(existing)} is not writable")
            _check_entries(path, label, writing=True)
        except OSError as exc:  # whatever else the file system says: one line, not a traceback
            raise ConfigError(f"{label}: {exc.strerror or exc}") from None

    @contextmanager
    def locked(self, command: str) -> Iterator[None]:
        """Hold the folder for `command` (run, sync); OutDirBusy if another process holds it."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            handle = (self.path / LOCK_FILE).open("a+")
        except OSError as exc:  # e.g. a read-only file system, which os.access does not see
            raise ConfigError(f"--out {shown(self.path)}: cannot write there ({exc.strerror or exc})") from None
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read(300).strip() or "another process"
                raise OutDirBusy(
                    f"{self.path} is in use by another amp-suite ({holder}); wait for it to end or use another folder"
                ) from None
            _say_who_holds(handle, command)
            yield
        finally:
            handle.close()  # closing the descriptor releases the lock


def is_plain_file(path: Path) -> bool:
    """A regular file itself, not a symbolic link to one (nor anything else)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except (OSError, ValueError):
        return False


def append_to(path: Path) -> BinaryIO:
    """`path` opened for appending (created if missing), never through a symbolic link and never
    anything but a regular file: OSError otherwise (ELOOP for a link), before a byte is written."""
    handle = open(path, "ab", opener=_no_follow)  # the caller closes it
    try:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # a FIFO opened non-blocking, a device
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        os.set_blocking(handle.fileno(), True)
    except BaseException:
        handle.close()
        raise
    return handle


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, 0o644)


def _check_entries(path: Path, label: str, writing: bool) -> None:
    """Each entry the suite writes is absent or what it should be, and no symbolic link."""
    for name, kind in EXPECTED_ENTRIES.items():
        _check_entry(path / name, kind, label, writing)
    logs = path / "logs"
    if logs.is_dir() and not logs.is_symlink():
        with os.scandir(logs) as entries:
            for entry in entries:
                _check_entry(Path(entry.path), "file", label, writing)
    # The store writes each run's artifacts under mlartifacts/<run id>/: a link there leads its writes out.
    for parent, folders, files in os.walk(path / "mlartifacts"):  # not into linked folders
        for name in folders + files:
            if os.path.islink(entry := os.path.join(parent, name)):
                raise ConfigError(f"{label}: {shown(entry)} {LINKED}")


def _check_entry(entry: Path, kind: str, label: str, writing: bool) -> None:
    if entry.exists() and not (entry.is_dir() if kind == "folder" else entry.is_file()):
        raise ConfigError(f"{label}: {shown(entry)} is not a {kind}")  # a device, a FIFO, a folder, ...
    if entry.is_symlink():  # even to the right kind: writing it would land wherever it leads
        raise ConfigError(f"{label}: {shown(entry)} {LINKED}")
    if writing and entry.exists() and not os.access(entry, os.W_OK):
        raise ConfigError(f"{label}: {shown(entry)} is not writable")


def _say_who_holds(handle, command: str) -> None:
    try:
        handle.truncate(0)
        handle.write(f"{command}, pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')}")
        handle.flush()
    except OSError:
        pass  # only the message to a second process would lose detail
