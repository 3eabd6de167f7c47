"""What a user's entry (`my_pkg.models:build`, `path/to/model.py:build`) names, checked from its
source text before anything of it runs. No torch here, and nothing of the user's is imported.

An entry runs the user's code, like a script: a matrix that names one is code. So the suite calls
only a function its source declares a workload builder, by its return annotation

    def build(...) -> UserWorkload:      # or -> amp_suite.UserWorkload, or the string "UserWorkload"

written in the module or file the entry names (a name it merely imports is not declared there).
A module of the standard library or a builtin one (shutil:rmtree, os:system, builtins:eval) is
never a workload builder: refused by its name, without looking further.

The source is found as `python -m` would find it (the working directory first, then sys.path, a
package's own folders for its submodules), without importing a package to look inside it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import sys
from pathlib import Path

DECLARATION = "UserWorkload"  # the return annotation that declares a workload builder
MAX_SOURCE_BYTES = 16 << 20  # a source file larger than this is not a model definition
# The Python files beside a file entry that its digest reads (what it imports as its neighbours);
# a folder with more, or larger, is digested by their names, sizes and times instead.
MAX_NEIGHBOURS, MAX_NEIGHBOUR_BYTES = 256, 1 << 20


class EntryRefused(ValueError):
    """The entry can't be called: the user's to fix, said in one line that names the entry."""


def split_entry(entry: str) -> tuple[str, str]:
    """(module or file, function) of `where:function`."""
    where, function = entry.rsplit(":", 1)
    return where, function


def refuse_standard_library(entry: str) -> None:
    """A module of Python's own is no workload builder, whatever its function does."""
    where, _ = split_entry(entry)
    if where.endswith(".py"):
        return  # a file: its declaration decides
    top = where.split(".", 1)[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise EntryRefused(
            f"entry {entry}: {top} is Python's own module, not a workload builder; an entry names your"
            f" function, declared `-> {DECLARATION}` (see docs/your-own-model.md)"
        )


def entry_source(entry: str, working_dir: Path | None = None) -> Path:
    """The Python file that defines the entry's function, found without importing anything."""
    where, function = split_entry(entry)
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise EntryRefused(f"entry {entry}: file {where} not found")
        return path
    refuse_standard_library(entry)
    spec, missing = _find_spec(where, working_dir or Path.cwd())
    if spec is None:
        hint = "run from the folder that holds it, or pip install it"
        raise EntryRefused(f"entry {entry}: no module named {missing!r} ({hint})")
    origin = spec.origin if spec.has_location else None
    if origin is None or not origin.endswith(".py"):
        raise EntryRefused(f"entry {entry}: {where} has no Python source to check that {function} is declared")
    return Path(origin)


def _find_spec(name: str, working_dir: Path):
    """(the module's spec, None), as the import system would find it but without running any
    package's __init__ (each part is looked up in its parent's folders); (None, the first name not
    found) where there is none."""
    parts = name.split(".")
    spec = importlib.machinery.PathFinder.find_spec(parts[0], [str(working_dir), *sys.path])
    if spec is None:  # an editable install's own finder, say
        spec = next((s for f in sys.meta_path if (s := _top_level_spec(f, parts[0])) is not None), None)
    for depth in range(1, len(parts)):
        if spec is None:
            break
        below = spec.submodule_search_locations
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: depth + 1]), below) if below else None
        if spec is None:
            return None, ".".join(parts[: depth + 1])
    return spec, None if spec is not None else parts[0]


def _top_level_spec(finder, name: str):
    find_spec = getattr(finder, "find_spec", None)
    if find_spec is None or finder in (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter):
        return None
    try:
        return find_spec(name, None)
    except Exception:  # a finder that can't answer for this name is not the one that has it
        return None


def check_declared(entry: str, source: Path) -> None:
    """The entry's function is defined in `source` with the declaration's return annotation."""
    _, function = split_entry(entry)
    tree = _parse(entry, source)
    definition = None
    for node in tree.body:  # the last definition at the top level is the one the module keeps
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            definition = node
    if definition is None:
        raise EntryRefused(f"entry {entry}: {source.name} has no function {function!r} defined at its top level")
    if not declares_builder(definition.returns):
        raise EntryRefused(
            f"entry {entry}: {function} is not declared a workload builder: write it"
            f" `def {function}(...) -> {DECLARATION}` (from amp_suite import {DECLARATION}), since a matrix"
            " that names an entry runs it"
        )


def declares_builder(annotation: ast.expr | None) -> bool:
    """`-> UserWorkload`, `-> amp_suite.UserWorkload`, or either as a string."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip().rsplit(".", 1)[-1] == DECLARATION
    if isinstance(annotation, ast.Name):
        return annotation.id == DECLARATION
    return isinstance(annotation, ast.Attribute) and annotation.attr == DECLARATION


def _parse(entry: str, source: Path) -> ast.Module:
    try:
        if source.stat().st_size > MAX_SOURCE_BYTES:
            raise EntryRefused(f"entry {entry}: {source.name} is larger than {MAX_SOURCE_BYTES >> 20} MiB")
        return ast.parse(source.read_bytes(), filename=source.name)
    except SyntaxError as exc:
        raise EntryRefused(f"entry {entry}: {source.name} line {exc.lineno}: {exc.msg}") from None
    except OSError as exc:
        raise EntryRefused(f"entry {entry}: {source.name} can't be read ({exc.strerror or exc})") from None


def declared_source(entry: str, working_dir: Path | None = None) -> Path:
    """The entry's source, once its function is found declared there; EntryRefused says why not."""
    refuse_standard_library(entry)
    source = entry_source(entry, working_dir)
    check_declared(entry, source)
    return source


def source_digest(source: Path) -> str:
    """What --resume compares: the entry's file, and the Python files beside it (what a file entry
    imports as its neighbours; a package's other modules), by their text where the folder is a
    model's folder, by their sizes and times where it holds more than one would read for this."""
    neighbours = sorted(path for path in source.parent.glob("*.py") if path.is_file() and path != source)
    digest = hashlib.sha256(b"entry\0" + source.read_bytes())
    small = len(neighbours) <= MAX_NEIGHBOURS and all(p.stat().st_size <= MAX_NEIGHBOUR_BYTES for p in neighbours)
    for path in neighbours:
        stat = path.stat()
        seen = path.read_bytes() if small else f"{stat.st_size}:{stat.st_mtime_ns}".encode()
        digest.update(f"{path.name}\0".encode() + seen + b"\0")
    return digest.hexdigest()[:16]
