"""`amp-suite ui --store`: which files it serves, and the one line for those it refuses; the links `ui` prints."""

from __future__ import annotations

import sqlite3

import pytest

from amp_suite.cli.store import announced_links, check_sqlite_store
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


def test_ui_links_the_newest_experiments_saved_view_then_each_other():
    base = "http://127.0.0.1:5000"
    first, *others = announced_links(base, [("7", "smoke"), ("2", "nightly")])
    view = "runs?viewStateShareKey=amp-suite&workflowType=machine_learning"
    assert first == f"MLflow UI on {base}/#/experiments/7/{view} (Ctrl-C to stop; experiment smoke)"
    assert others == [f"  experiment nightly: {base}/#/experiments/2/{view}"]


def test_ui_links_the_experiments_list_where_no_experiment_holds_runs():
    assert announced_links("http://h:1", []) == [
        "MLflow UI on http://h:1/#/experiments?workflowType=machine_learning (Ctrl-C to stop)"
    ]
