"""An entry's source, read before anything of it runs: found as `python -m` would find it without
importing a package, declared by its return annotation, never a module of Python's own, and
digested with its neighbours for --resume."""

from __future__ import annotations

import ast
import sys

import pytest

from amp_suite.config.entries import (
    EntryRefused,
    declared_source,
    declares_builder,
    entry_source,
    refuse_standard_library,
    source_digest,
)


@pytest.mark.parametrize(
    ("annotation", "declared"),
    [("UserWorkload", True), ("amp_suite.UserWorkload", True), ("'UserWorkload'", True),
     ("'amp_suite.UserWorkload'", True), ("dict", False), ("'NotUserWorkload'", False), ("None", False)],
)  # fmt: skip
def test_a_builder_is_declared_by_its_return_annotation(annotation, declared):
    (function,) = ast.parse(f"def build() -> {annotation}: pass").body
    assert declares_builder(function.returns) is declared
    (unannotated,) = ast.parse("def build(): pass").body
    assert not declares_builder(unannotated.returns)


@pytest.mark.parametrize("entry", ["shutil:rmtree", "os:system", "os.path:join", "builtins:eval", "sys:exit"])
def test_a_module_of_pythons_own_is_refused_by_its_name(entry):
    with pytest.raises(EntryRefused, match="is Python's own module, not a workload builder"):
        refuse_standard_library(entry)


def test_a_file_named_like_a_standard_module_is_judged_by_its_declaration(tmp_path):
    (tmp_path / "shutil.py").write_text("from amp_suite import UserWorkload\ndef build() -> UserWorkload: pass\n")
    refuse_standard_library(f"{tmp_path / 'shutil.py'}:build")  # a file: not refused by its name
    assert declared_source(f"{tmp_path / 'shutil.py'}:build") == tmp_path / "shutil.py"


def test_a_module_is_found_in_its_package_without_running_the_packages_init(tmp_path):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    (package / "models.py").write_text("def build() -> 'UserWorkload': pass\n")
    assert declared_source("mypkg.models:build", tmp_path) == package / "models.py"
    assert not (tmp_path / "ran").exists() and "mypkg" not in sys.modules
    with pytest.raises(EntryRefused, match="no module named 'mypkg.nothing'"):
        entry_source("mypkg.nothing:build", tmp_path)
    with pytest.raises(EntryRefused, match="no module named 'nopkg'"):
        entry_source("nopkg.models:build", tmp_path)


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def build(): pass\n", "build is not declared a workload builder"),
        ("from elsewhere import build\n", "has no function 'build' defined at its top level"),
        ("def build() -> 'UserWorkload':\n  pass\ndef build(): pass\n", "build is not declared"),  # the last wins
        ("def build(:\n", "line 1"),
    ],
)
def test_an_entry_not_declared_in_its_own_source_is_refused(tmp_path, source, says):
    (tmp_path / "model.py").write_text(source)
    with pytest.raises(EntryRefused, match=says):
        declared_source(f"{tmp_path / 'model.py'}:build")


def test_the_digest_follows_the_entry_and_the_python_files_beside_it(tmp_path):
    entry, neighbour = tmp_path / "model.py", tmp_path / "layers.py"
    entry.write_text("def build() -> 'UserWorkload': pass\n")
    neighbour.write_text("WIDTH = 4\n")
    (tmp_path / "notes.txt").write_text("not Python")
    first = source_digest(entry)
    assert source_digest(entry) == first
    (tmp_path / "notes.txt").write_text("still not Python")
    assert source_digest(entry) == first
    neighbour.write_text("WIDTH = 8\n")
    assert source_digest(entry) != first
