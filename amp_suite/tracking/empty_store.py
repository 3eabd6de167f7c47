"""A new SQLite store starts as a copy of an empty one MLflow made earlier. No torch here.

MLflow makes a new SQLite store by creating its first tables and then running every schema
migration since (dozens of them, each rebuilding tables): seconds on every fresh --out folder,
the same seconds each time. The first store this MLflow version makes is therefore kept, emptied
of its Default experiment, in the user's cache (~/.cache/amp-suite, or $XDG_CACHE_HOME), and
later new stores start as a byte copy of it: the same schema at the same revision, so MLflow
finds nothing to migrate. MLflow then adds the Default experiment itself, located for this
store (and MlflowStore deletes it again while it is empty: our stores list our experiments).
Without a cache (unwritable, or a different MLflow), MLflow makes the store as before.

The cache is a file anyone with the user's rights may have replaced: a copy that is not an empty
MLflow store (garbage, or one holding an experiment whose artifacts go elsewhere) is emptied out
of the new store again, MLflow makes the store itself, and the cache is made anew from it.
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

from amp_suite.errors import ConfigError
from amp_suite.files import read_limited
from amp_suite.paths import cache_folder

logger = logging.getLogger(__name__)
MAX_TEMPLATE = 16 << 20  # an empty store is about 1 MB; a larger cache file is no empty store


def cached_empty_store() -> Path:
    return cache_folder() / f"mlflow-{metadata.version('mlflow')}-empty.db"


def seed(handle: BinaryIO, database: Path) -> bool:
    """Fill a new, empty store file (open for appending, locked) from the cache; False: no usable
    cache, and the file is empty again. An OSError writing it (a full disk) is the caller's."""
    template = _cached_bytes()
    if template is None:
        return False
    handle.write(template)
    handle.flush()
    if _is_empty_store(database):  # checked as copied: the cache may change under us
        return True
    logger.debug("the cached empty MLflow store %s is not one: MLflow makes the store", cached_empty_store())
    handle.truncate(0)
    return False


def _cached_bytes() -> bytes | None:
    try:
        return read_limited(cached_empty_store(), MAX_TEMPLATE)
    except (OSError, ConfigError):  # unreadable, not a regular file, too large: no cache
        return None


def _is_empty_store(database: Path) -> bool:
    """An MLflow store with nothing in it: a schema revision, and no experiment, run or location."""
    try:
        with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as connection:
            if connection.execute("PRAGMA quick_check").fetchone() != ("ok",):
                return False
            revision = connection.execute("SELECT version_num FROM alembic_version").fetchone()
            return revision is not None and not _holds_anything(connection)
    except sqlite3.Error:  # not a database, or not MLflow's
        return False


def _holds_anything(connection: sqlite3.Connection) -> bool:
    tables = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        query = f'SELECT 1 FROM "{table.replace(chr(34), chr(34) * 2)}"'
        if table == "workspaces":  # MLflow's Default workspace is there from the start, locating nothing
            query += " WHERE default_artifact_root IS NOT NULL OR trace_archival_location IS NOT NULL"
        if table != "alembic_version" and connection.execute(query).fetchone():
            return True
    return False


def keep(database: Path) -> None:
    """After MLflow made `database` from nothing: keep an emptied copy for the next new store."""
    target = cached_empty_store()
    if target.exists() and _is_empty_store(target):
        return  # else it is replaced, whole
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
