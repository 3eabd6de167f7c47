"""Path arguments, checked once at the edge into one-line errors. No torch here.

What a path names is looked at before anything is read or written: a loop of symbolic links, a
name longer than file systems take and the kernel's own trees would otherwise surface later as a
traceback from deep inside MLflow or pathlib, after torch has loaded, or (as root) as a whole
run written into /dev.
"""

from __future__ import annotations

import codecs
import errno
import os
import sys
from pathlib import Path

from amp_suite.errors import ConfigError, shorten

NAME_MAX = 255  # bytes in one name: ext4, xfs, btrfs, tmpfs, overlayfs and NFS all stop there
PATH_MAX = 4096  # bytes in a whole path, for the kernel's calls
# Their entries are the kernel's (processes, devices, drivers), not a place for a run's files.
KERNEL_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))
ORDINARY_UNDER_KERNEL_TREES = (Path("/dev/shm"),)  # a plain tmpfs, where fast scratch space lives


def shown(path: Path | str) -> str:
    """A path as messages echo it: bounded, whatever was given."""
    return shorten(str(path), 200)


def check_path(path: Path, option: str = "") -> Path:
    """`path` with its symbolic links resolved, or one ConfigError line saying why nothing can
    live there. A path that does not exist (yet) is fine: its callers say what they need of it."""
    raw = _text_bytes(path, option)
    label = f"{option} {shown(path)}".strip()
    if len(raw) >= PATH_MAX:
        raise ConfigError(f"{label}: {len(raw)} bytes long; paths are limited to {PATH_MAX - 1}")
    if any(len(name) > NAME_MAX for name in raw.split(b"/")):
        raise ConfigError(f"{label}: a name in it is longer than {NAME_MAX} bytes, the file systems' limit")
    _walk(path, label)
    resolved = Path(os.path.realpath(path))
    for tree in KERNEL_TREES:
        inside = resolved == tree or tree in resolved.parents
        if inside and not any(resolved == ok or ok in resolved.parents for ok in ORDINARY_UNDER_KERNEL_TREES):
            raise ConfigError(f"{label}: {tree} is a kernel file system, not a place for files")
    return resolved


def _text_bytes(path: Path, option: str) -> bytes:
    """The path's bytes, if they are text that reads the same everywhere the suite writes it: MLflow's
    URIs and the records are UTF-8, and the file system takes names in this Python's encoding. A
    name that is not UTF-8, or (under an ASCII-only locale) not ASCII, would otherwise be refused
    by MLflow midway, with the folder half made, or name another folder."""
    encoding = sys.getfilesystemencoding()
    try:
        raw = os.fsencode(path)
        raw.decode("utf-8").encode(encoding)
        return raw
    except UnicodeError:
        label = f"{option} {shorten(_readable(path), 200)}".strip()
    if codecs.lookup(encoding).name == "utf-8":
        raise ConfigError(f"{label}: a name in it is not UTF-8 text, which the MLflow store and the records need")
    raise ConfigError(
        f"{label}: this Python reads file names as {encoding} (an ASCII-only locale), which can't name it;"
        " run under a UTF-8 locale (LANG=C.UTF-8) or with PYTHONUTF8=1"
    )


def _readable(path: Path) -> str:
    """A path that is not text, shown as far as it is (its other bytes escaped)."""
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeError:  # text this locale can't encode, e.g. from a URI
        return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def _walk(path: Path, label: str) -> None:
    """Follow the path a name at a time, as far as it exists, to say where it breaks."""
    for prefix in [*reversed(path.parents[:-1]), path] if path.parts else []:
        try:
            os.stat(prefix)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return  # the rest is not there (yet), or a file sits where a folder is wanted
            if exc.errno == errno.ELOOP:
                raise ConfigError(f"{label}: symbolic links loop at {shown(prefix)}") from None
            raise ConfigError(f"{label}: cannot reach {shown(prefix)} ({exc.strerror})") from None


def cache_folder() -> Path:
    """Where the suite keeps what it builds once and reuses (data sets, an empty MLflow store):
    $XDG_CACHE_HOME/amp-suite, else ~/.cache/amp-suite, beside Hugging Face's and torch's caches,
    which follow $XDG_CACHE_HOME too."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "amp-suite"


def is_folder(path: Path) -> bool:
    """Path.is_dir without the OSError a name too long for the file system raises."""
    try:
        return path.is_dir()
    except OSError:
        return False


def is_file(path: Path) -> bool:
    """Path.is_file without the OSError a name too long for the file system raises."""
    try:
        return path.is_file()
    except OSError:
        return False
