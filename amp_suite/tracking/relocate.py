"""Point an embedded MLflow store's artifact locations at the folder it lives in now.

MLflow keeps artifact locations as absolute URIs (file:///runs/mlartifacts/...). A run folder
that was moved, copied off a container volume or gathered from another box still has its
mlartifacts/ beside mlflow.db, but the store points at the old path, so the UI lists no
artifacts (or, for a copy, the original's). Before serving, `amp-suite ui` points them at the
folder's own mlartifacts/, where the embedded store always keeps its artifacts; `run` and `sync`
do the same before they write, so that a copy never writes into the original's mlartifacts/. Only those
pointers change: the store mirrors results.jsonl, and the artifacts themselves are untouched.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from urllib.parse import unquote, urlsplit

from amp_suite.errors import ConfigError

ARTIFACTS = "mlartifacts"  # where the embedded store's artifacts live, beside mlflow.db


def relocate_artifacts(database: Path) -> int:
    """Rewrite artifact locations in `database` to <its folder>/mlartifacts; returns how many
    experiments were moved. Locations outside amp-suite's file://.../mlartifacts layout (e.g.
    an experiment a sync created with MLflow's default) are left alone."""
    folder = database.parent / ARTIFACTS
    if not folder.is_dir() or not database.is_file():
        return 0
    try:
        return _relocate(database, folder.resolve().as_uri())
    except sqlite3.Error as exc:  # not a database, read-only, locked past the timeout
        raise ConfigError(f"{database}: its artifact locations could not be repointed ({exc})") from None


def _relocate(database: Path, target: str) -> int:
    moved = 0
    with closing(sqlite3.connect(database)) as connection, connection:  # one transaction
        try:
            experiments = connection.execute("SELECT experiment_id, artifact_location FROM experiments").fetchall()
        except sqlite3.Error:  # not (yet) an MLflow store: nothing to point anywhere
            return 0
        for experiment_id, location in experiments:
            if not _elsewhere(location, target):
                continue
            connection.execute(
                "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?)"
                " WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                (target, len(location) + 1, experiment_id, len(location), location),
            )
            connection.execute(
                "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?", (target, experiment_id)
            )
            moved += 1
    return moved


def _elsewhere(location: str | None, target: str) -> bool:
    if not location or location == target or not location.startswith("file://"):
        return False
    return unquote(urlsplit(location).path).rstrip("/").endswith(f"/{ARTIFACTS}")
