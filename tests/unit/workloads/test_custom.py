"""A user's entry called as a cell calls it: only the function its source declares, and a clean
exit of the user's code is a named failure."""

from __future__ import annotations

import pytest

from amp_suite.workloads.custom import built_by
from amp_suite.workloads.entry import EntryError

REBOUND = """
from pathlib import Path

from amp_suite import UserWorkload


def build() -> UserWorkload:
    pass


def _elsewhere():
    Path(__file__).with_name("called").write_text("yes")


build = _elsewhere  # the name the entry gives now holds another function
"""


def test_a_name_rebound_after_its_declaration_is_refused_before_it_is_called(tmp_path):
    (tmp_path / "rebound.py").write_text(REBOUND)
    with pytest.raises(EntryError, match="what the module holds as build is not declared -> UserWorkload"):
        built_by(f"{tmp_path / 'rebound.py'}:build", {})
    assert not (tmp_path / "called").exists()


def test_system_exit_in_the_entry_is_an_entry_error(tmp_path):
    (tmp_path / "leaves.py").write_text("from amp_suite import UserWorkload\n\ndef build() -> UserWorkload:\n"
                                        "    raise SystemExit(3)\n")  # fmt: skip
    with pytest.raises(EntryError, match=r"called sys.exit\(3\) while it was being called"):
        built_by(f"{tmp_path / 'leaves.py'}:build", {})
