"""A user's entry, `my_pkg.models:build` or `path/to/model.py:build`, found and called.

A matrix that names an entry runs the user's code, like a script. So before anything of it is
imported, its source must declare the function a workload builder (`-> UserWorkload`), and a module
of the standard library is refused by its name (amp_suite.config.entries, which reads the source
without importing it). A module is then imported as `python -m` would import it, from the working
directory first; a file is loaded under a name of its own, with its folder on the path so that it
can import its neighbours. Only a cell's process (and `amp-suite run`'s check of the entry, in a
child process) calls this: the user's code never runs in the process that keeps the records.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from amp_suite.config.entries import EntryRefused, declared_source


class EntryError(Exception):
    """The entry can't be found, loaded or called: the user's to fix, said in one line."""


def find_entry(entry: str) -> Callable[..., Any]:
    """The function the entry names, its module imported once its source declares it."""
    where, name = entry.rsplit(":", 1)
    try:
        declared_source(entry)
    except EntryRefused as exc:
        raise EntryError(str(exc)) from None
    try:
        module = _load_file(Path(where)) if where.endswith(".py") else _import_module(where)
    except EntryError as exc:
        raise EntryError(f"entry {entry}: {exc}") from None
    except SystemExit as exc:  # the module ended its own import: never a pass
        raise EntryError(f"entry {entry} called sys.exit({exc.code!r}) while it was being imported") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise EntryError(f"entry {entry}: {where} has no function {name!r}")
    return function


def _import_module(name: str):
    if os.getcwd() not in sys.path:  # last: a datasets.py beside the user's module must not shadow the library
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            hint = "run from the folder that holds it, or pip install it"
            raise EntryError(f"no module named {exc.name!r} ({hint})") from None
        raise  # the module exists and failed to import one of its own: the user's traceback says where


def _load_file(path: Path):
    if not path.is_file():
        raise EntryError(f"file {path} not found")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"amp_suite_entry_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise EntryError(f"file {path} can't be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look a module up by name
    spec.loader.exec_module(module)
    return module
