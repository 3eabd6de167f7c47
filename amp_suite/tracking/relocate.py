"""Pin a SQLite store's artifacts to one folder: every experiment and every run in it. No torch here.

MLflow obeys whatever artifact location a store holds. A run folder that was moved, copied off a
container volume or gathered from another box points at its old path (the UI then lists no
artifacts, or a copy writes into the original's); a store someone edited can point anywhere
(`/tmp/elsewhere`, another user's home); and MLflow makes every store's Default experiment in
./mlruns of whichever directory the store was first opened from. So each store the suite makes,
and a run folder's own store every time it is opened (by `run`, `sync` and `ui`), has every
experiment located at <folder>/mlartifacts and every run at <folder>/mlartifacts/<run id>/artifacts,
the layout MLflow gives runs of an experiment so located. Only those pointers change: the store
mirrors results.jsonl, and artifacts already written elsewhere are neither read nor moved.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

from amp_suite.errors import ConfigError, shorten
from amp_suite.paths import shown

ARTIFACTS = "mlartifacts"  # where the embedded store's artifacts live, beside mlflow.db
# What MLflow itself accepts as a run id (mlflow.utils.validation): no '/', no '..', so a run's
# artifact path built from it stays in the folder.
RUN_ID = re.compile(r"[a-zA-Z0-9][\w\-]{0,255}")


def artifact_location(folder: Path) -> str:
    """The URI an experiment whose artifacts go into `folder` holds."""
    return folder.resolve().as_uri()


def pin_artifacts(database: Path, folder: Path) -> int:
    """Point every experiment and run in `database` at `folder`; returns how many experiments
    pointed elsewhere. One ConfigError line if it is not an MLflow store, holds a run id that is
    no MLflow run id, or must be repointed and can't be written (read-only, locked)."""
    target = artifact_location(folder)
    try:
        # mode=rw: a store that is not there is an error here, never a new empty file.
        with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=rw", uri=True)) as connection:
            experiments, runs = _stray(connection, target, database)
            if experiments or runs:
                with connection:  # one transaction
                    _repoint(connection, target)
    except sqlite3.Error as exc:
        raise ConfigError(
            f"{shown(database)}: its artifact locations could not be pinned to {shown(folder)} ({exc})"
        ) from None
    return experiments


def _stray(connection: sqlite3.Connection, target: str, database: Path) -> tuple[int, int]:
    """(experiments, runs) whose artifacts point anywhere but `target`."""
    try:
        experiments = connection.execute("SELECT artifact_location FROM experiments").fetchall()
        runs = connection.execute("SELECT run_uuid, artifact_uri FROM runs").fetchall()
    except sqlite3.DatabaseError as exc:  # not a database, or a database MLflow did not make
        raise ConfigError(f"{shown(database)}: not an MLflow store ({exc})") from None
    for run_id, _ in runs:
        if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
            raise ConfigError(f"{shown(database)}: not an MLflow store (a run id {shorten(str(run_id), 40)!r})")
    stray_experiments = sum(1 for (location,) in experiments if location != target)
    stray_runs = sum(1 for run_id, uri in runs if uri != f"{target}/{run_id}/artifacts")
    return stray_experiments, stray_runs


def _repoint(connection: sqlite3.Connection, target: str) -> None:
    connection.execute(
        "UPDATE experiments SET artifact_location = ? WHERE artifact_location IS NOT ?", (target, target)
    )
    runs = "? || '/' || run_uuid || '/artifacts'"
    connection.execute(f"UPDATE runs SET artifact_uri = {runs} WHERE artifact_uri IS NOT {runs}", (target, target))
