"""The --out folder of a run: results.jsonl, invocations.jsonl, logs/, the embedded MLflow store,
and a lock so that one amp-suite process writes it at a time. No torch here.

The lock is an flock on `.amp-suite.lock`: the kernel drops it when its process dies, however it
dies, so whoever takes it next knows that every invocation still open in invocations.jsonl was
killed. The lock file also says who holds it, for the message the second process prints.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from amp_suite.config import ConfigError
from amp_suite.files import open_regular
from amp_suite.paths import check_path, shown
from amp_suite.records.invocations import InvocationLog
from amp_suite.records.results import ResultsFile

LOCK_FILE = ".amp-suite.lock"
# What a run writes into its folder: anything else under these names (a symlink to /dev/full, a
# folder named results.jsonl) would hang, flood or crash the run later, so it is refused up front.
# Nor is any of them a symbolic link: a copied folder whose mlflow.db, logs/ or mlartifacts/ leads
# elsewhere would write into the original, or outside the folder.
EXPECTED_ENTRIES = {
    "results.jsonl": "file", "invocations.jsonl": "file", "mlflow.db": "file", LOCK_FILE: "file", "logs": "folder",
    "report": "folder", "report/figures": "folder", "mlartifacts": "folder",
}  # fmt: skip


class OutDirBusy(ConfigError):
    """Another amp-suite process holds the folder."""


class RunDirectory:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.results = ResultsFile(path / "results.jsonl")
        self.invocations = InvocationLog(path / "invocations.jsonl")

    def log_path(self, cell_id: str) -> Path:
        return self.path / "logs" / (cell_id.replace("/", "_") + ".log")

    def check_syncable(self) -> None:
        """One ConfigError line if `sync` can't read the folder's records (results.jsonl or
        invocations.jsonl there but not a regular file: a symlink to /dev/zero or a FIFO would
        flood or hang the reader) or would write through its entries (the lock, its own store)."""
        for path in (self.results.path, self.invocations.path):
            with open_regular(path):
                pass
        _check_entries(self.path, f"sync {shown(self.path)}", writing=False)

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


def _check_entries(path: Path, label: str, writing: bool) -> None:
    """Each entry the suite writes is absent or what it should be, and no symbolic link."""
    for name, kind in EXPECTED_ENTRIES.items():
        entry = path / name
        if entry.exists() and not (entry.is_dir() if kind == "folder" else entry.is_file()):
            raise ConfigError(f"{label}: {shown(entry)} is not a {kind}")  # a device, a FIFO, a folder, ...
        if entry.is_symlink():  # even to the right kind: writing it would land wherever it leads
            raise ConfigError(f"{label}: {shown(entry)} is a symbolic link; the suite writes only inside the folder")
        if writing and entry.exists() and not os.access(entry, os.W_OK):
            raise ConfigError(f"{label}: {shown(entry)} is not writable")


def _say_who_holds(handle, command: str) -> None:
    try:
        handle.truncate(0)
        handle.write(f"{command}, pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')}")
        handle.flush()
    except OSError:
        pass  # only the message to a second process would lose detail
