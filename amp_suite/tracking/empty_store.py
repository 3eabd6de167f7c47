"""A new SQLite store starts as a copy of an empty one MLflow made earlier. No torch here.

MLflow makes a new SQLite store by creating its first tables and then running every schema
migration since (dozens of them, each rebuilding tables): seconds on every fresh --out folder,
the same seconds each time. The first store this MLflow version makes is therefore kept, emptied
of its Default experiment, in the user's cache (~/.cache/amp-suite, or $XDG_CACHE_HOME), and
later new stores start as a byte copy of it: the same schema at the same revision, so MLflow
finds nothing to migrate. MLflow then adds the Default experiment itself, located for this
store. Without a cache (unwritable, or a different MLflow), MLflow makes the store as before.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
from contextlib import closing
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)


def cached_empty_store() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "amp-suite" / f"mlflow-{metadata.version('mlflow')}-empty.db"


def seed(handle: BinaryIO) -> bool:
    """Fill a new, empty store file (open for appending, locked) from the cache; False: no cache."""
    try:
        handle.write(cached_empty_store().read_bytes())
        handle.flush()
        return True
    except OSError:
        return False


def keep(database: Path) -> None:
    """After MLflow made `database` from nothing: keep an emptied copy for the next new store."""
    target = cached_empty_store()
    if target.exists():
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=target.parent, suffix=".db")
        os.close(descriptor)
    except OSError as exc:  # a cache is a convenience: the store itself is made
        logger.debug("no cache for an empty MLflow store in %s: %s", target.parent, exc)
        return
    try:
        with closing(sqlite3.connect(database)) as source, closing(sqlite3.connect(temporary)) as copy:
            source.backup(copy)
            with copy:  # MLflow re-creates the Default experiment, with this store's location
                copy.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
                copy.execute("DELETE FROM experiments WHERE experiment_id = 0")
        os.replace(temporary, target)  # whole or not at all, however many processes race here
    except (OSError, sqlite3.Error) as exc:
        logger.debug("not keeping an empty MLflow store in %s: %s", target, exc)
        Path(temporary).unlink(missing_ok=True)
