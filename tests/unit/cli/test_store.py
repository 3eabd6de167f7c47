"""`amp-suite ui --store`: which files it serves, and the one line for those it refuses."""

from __future__ import annotations

import sqlite3

import pytest

from amp_suite.cli.store import check_sqlite_store
from amp_suite.config import ConfigError


def _database(path, table: str):
    with sqlite3.connect(path) as connection:
        connection.execute(f"CREATE TABLE {table} (x)")
    return path


def test_a_sqlite_file_with_mlflows_tables_is_served(tmp_path):
    check_sqlite_store(_database(tmp_path / "team.db", "experiments"))  # any name, any folder


@pytest.mark.parametrize("make, expected", [
    (lambda p: p, "no such file"),
    (lambda p: p.mkdir() or p, "is a folder, not a regular file"),
    (lambda p: p.write_text("name: tiny\n") and p, "not a SQLite database"),
    (lambda p: _database(p, "orders"), "a SQLite database, but not an MLflow store"),
])  # fmt: skip
def test_anything_else_is_refused_in_one_line(tmp_path, make, expected):
    store = make(tmp_path / "store.db")
    with pytest.raises(ConfigError) as refused:
        check_sqlite_store(store)
    assert str(refused.value).startswith(f"--store {store}: ") and expected in str(refused.value)
    assert "\n" not in str(refused.value)
