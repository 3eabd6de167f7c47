"""The package's shape, as its docstrings state it: what says it needs no torch imports without it,
no module imports itself back through another, imports point down the layers, and the tests mirror
the package."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "amp_suite"
TORCH_FREE = re.compile(r"No torch here|stays torch-free")  # how a module, or a package's __init__, says it


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache  # parsed once for every test here; none changes a tree
def modules() -> dict[str, ast.Module]:
    return {module_name(path): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def torch_free_modules() -> list[str]:
    """Every module whose docstring says it needs no torch, and every module of a package that says so."""
    trees = modules()
    claims = [name for name, tree in trees.items() if TORCH_FREE.search(ast.get_docstring(tree) or "")]
    packages = [name for name in claims if (REPO / name.replace(".", "/") / "__init__.py").exists()]
    return sorted({name for name in trees if name in claims or any(name.startswith(f"{p}.") for p in packages)})


BLOCK_TORCH = """
import importlib, sys
class NoTorch:  # any `import torch` raises, as on a machine without it
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision", "transformers", "datasets"):
            raise ImportError(f"{name} is blocked")
sys.meta_path.insert(0, NoTorch())
for name in sys.argv[1:]:
    importlib.import_module(name)
"""


def test_every_module_that_says_it_needs_no_torch_imports_with_torch_blocked():
    names = torch_free_modules()
    parent_side = ("records", "execution", "analysis", "config", "report")  # the parent never loads torch
    assert all(any(n.startswith(f"amp_suite.{package}.") for n in names) for package in parent_side), names
    done = subprocess.run([sys.executable, "-c", BLOCK_TORCH, *names], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_torch_block_can_fail():
    pipeline = "amp_suite.cell.pipeline"
    done = subprocess.run([sys.executable, "-c", BLOCK_TORCH, pipeline], capture_output=True, text=True, cwd=REPO)
    assert done.returncode != 0 and "torch is blocked" in done.stderr


def test_the_package_root_is_its_packages_and_a_few_shared_modules():
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root) <= 8, root


def imports_at_load(tree: ast.Module) -> set[str]:
    """The amp_suite modules a module imports when it loads (type-checking imports too; not the
    ones deferred into functions)."""
    found, pending = set(), list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        pending.extend(ast.iter_child_nodes(node))
    return {target for target in found if target.startswith("amp_suite")}


def test_no_module_imports_itself_back_through_another():
    trees = modules()
    graph = {name: {t for t in imports_at_load(tree) if t in trees and t != name} for name, tree in trees.items()}
    cycles, state = [], {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)


PAST_THE_RECORD = ("amp_suite.analysis", "amp_suite.report", "amp_suite.cli", "amp_suite.tracking")


def test_nothing_past_the_record_names_a_workload_or_a_precision():
    """The claims, the report, the terminal and the tracker read the traits workloads and precision
    modes declare (config.workloads, config.precisions), so that a new one is judged and shown
    without editing them."""
    from amp_suite.config.precisions import PRECISIONS
    from amp_suite.config.workloads import WORKLOADS

    named = set(PRECISIONS) | set(WORKLOADS)
    found = [
        f"{name}:{node.lineno}: {node.value!r}"
        for name, tree in modules().items()
        if name.startswith(PAST_THE_RECORD)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in named
    ]
    assert not found, "\n".join(found)


STATUS_HOME = "amp_suite.config.base"  # Status, and a constant for each of its values
NOT_A_CELL_STATUS = {  # the same word, meaning something else: (module, the literal)
    ("amp_suite.records.invocations", "interrupted"),  # how an invocation ended
    ("amp_suite.cell.ddp.launch", "oom"),  # a rank's report: did it run out of memory
    ("amp_suite.cell.ddp.rank", "oom"),
    ("amp_suite.tracking.empty_store", "ok"),  # SQLite's answer to PRAGMA quick_check
}


def test_a_cells_status_is_spelled_only_where_its_constants_are():
    """Each status a cell ends in ("ok", "skipped", ...) is written once, as config.base's constants;
    every module that decides or reads one uses them (issue 54), so a typo is a NameError, not a
    branch that never runs."""
    from typing import get_args

    from amp_suite.config import base

    statuses = set(get_args(base.Status))
    assert statuses == {base.OK, base.SKIPPED, base.FAILED, base.DIVERGED, base.OOM, base.INTERRUPTED}
    spelled = [
        f"{name}:{node.lineno}: {node.value!r}"
        for name, tree in modules().items()
        if name != STATUS_HOME
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in statuses and (name, node.value) not in NOT_A_CELL_STATUS
    ]
    assert not spelled, "\n".join(spelled)


DEVICE_TYPES = {"cuda", "cpu", "rocm", "hip", "mps", "xpu"}  # torch's device types, and ROCm's names
BACKENDS_HOME = "amp_suite.hardware"  # the backends, and the probe and doctor that ask them


def device_comparisons(tree: ast.Module) -> list[int]:
    """The lines of `tree` that compare with a device type: `x == "cuda"`, `t in ("cuda", "cpu")`, and
    a dict keyed by device types (a lookup is the same branch; one key alone is a field, such as a
    machine's "cuda" version)."""

    def names_a_device(node: ast.AST) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(names_a_device(element) for element in node.elts)
        return isinstance(node, ast.Constant) and node.value in DEVICE_TYPES

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(names_a_device(side) for side in [node.left, *node.comparators]):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and sum(key is not None and names_a_device(key) for key in node.keys) > 1:
            lines.append(node.lineno)
    return lines


def test_no_module_outside_the_backends_compares_a_device_type():
    """Device branching is behind amp_suite.hardware.backends (issue 54): a module asks its device's
    backend (backend_of, backend_named) for what differs, and a record describes its machine by its
    kind (records.machine.described): a new kind of device is a backend, not a search for `== "cuda"`."""
    branches = [
        f"{name}:{line}"
        for name, tree in modules().items()
        if name != BACKENDS_HOME and not name.startswith(f"{BACKENDS_HOME}.")
        for line in device_comparisons(tree)
    ]
    assert not branches, "\n".join(branches)


def test_the_device_comparison_check_can_fail():
    branching = 'if device.type == "cuda": pass\nx = kind in ("mps", "other")\nmb = {"cpu": 0.0, "cuda": 1.0}[t]\n'
    tree = ast.parse(branching)
    assert device_comparisons(tree) == [1, 2, 3]
    fine = 'make_policy(precision, "cpu")\nif x == "cudnn": pass\nversions = {"cuda": "13.0", "torch": "2.14"}\n'
    assert device_comparisons(ast.parse(fine)) == []


ORCHESTRATION = ("amp_suite.execution", "amp_suite.cli")  # runs cells; a cell never reaches back into it
PARENT_SIDE = (*ORCHESTRATION, "amp_suite.records", "amp_suite.analysis")
CHILD_SIDE = ("amp_suite.cell", "amp_suite.instruments")


def test_the_process_boundary_is_the_package_boundary():
    """The cell's process (cell/, instruments/) imports nothing of the parent's orchestration, and
    the parent loads nothing of the cell's side (a worker imports the cell inside its child)."""
    crossings = [
        f"{name} imports {target}"
        for name, tree in modules().items()
        for target in imports_at_load(tree)
        if (name.startswith(CHILD_SIDE) and target.startswith(ORCHESTRATION))
        or (name.startswith(PARENT_SIDE) and target.startswith(CHILD_SIDE))
    ]
    assert not crossings, "\n".join(crossings)


# The packages from the bottom up. A module imports from its own package and from the layers below
# it, never from its own layer's other packages nor from above, deferred and type-checking imports
# included: records are data the hardware probe fills in, and the instruments measure whatever
# step the cell hands them. The shared modules at the package root (errors, paths, files, signals,
# text) are the floor; the package's __init__ and __main__ are its doors, above every layer.
ROOT = ""
LAYERS = (
    (ROOT,),
    ("config",),
    ("data", "records"),
    ("instruments",),
    ("hardware", "workloads"),
    ("cell", "analysis"),
    ("tracking",),
    ("report", "execution"),
    ("cli",),
)
PACKAGES = {package for layer in LAYERS for package in layer}
DOORS = ("amp_suite", "amp_suite.__main__")


@functools.cache
def package_of(module: str) -> str:
    """The package a module belongs to: the first name below amp_suite, or ROOT for the shared modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1] / "__init__.py").exists() else ROOT


def layer_of(package: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if package in layer)


def every_import(tree: ast.Module) -> set[str]:
    """The amp_suite modules a module imports anywhere, inside functions too."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {target for target in found if target == "amp_suite" or target.startswith("amp_suite.")}


@functools.cache
def package_imports() -> tuple[tuple[str, str, str, str], ...]:
    """(importer's package, importer, imported module, its package) for every import between packages."""
    return tuple(
        (package_of(name), name, target, package_of(target))
        for name, tree in modules().items()
        if name not in DOORS
        for target in sorted(every_import(tree))
        if package_of(target) != package_of(name)
    )


def test_every_package_has_a_layer():
    assert {package_of(name) for name in modules() if name not in DOORS} == PACKAGES


@pytest.mark.parametrize("lower, upper", [("records", "hardware"), ("instruments", "cell")])
def test_records_never_import_hardware_and_instruments_never_import_the_cell(lower, upper):
    """The two that once ran upward: a record carries the machine hardware describes (its model
    lives in records.machine), and a diagnostic takes any step that fits its protocol
    (instruments.diagnostics.PrecisionStep), not the cell's policy."""
    crossings = [f"{name} imports {target}" for p, name, target, q in package_imports() if (p, q) == (lower, upper)]
    assert not crossings, "\n".join(crossings)
    assert layer_of(lower) < layer_of(upper)  # and the layers say so, so that the test below holds it too


def test_imports_point_down_the_layers():
    upward = [f"{name} imports {target}" for p, name, target, q in package_imports() if layer_of(q) >= layer_of(p)]
    assert not upward, "\n".join(upward)


UNIT_TESTS = REPO / "tests" / "unit"


def test_the_unit_tests_mirror_the_package():
    """tests/unit/<package>/ for each package, and in it test_<module>.py for a module or subpackage
    at any depth of that package, or test_<module>_<aspect>.py beside it (Lightning's test_amp.py
    and test_amp_integration.py): a newcomer finds a module's tests by its name."""
    strays = []
    for folder in sorted(path for path in UNIT_TESTS.iterdir() if path.is_dir() and path.name != "__pycache__"):
        package = PACKAGE / folder.name
        if not (package / "__init__.py").exists():
            strays.append(f"{folder.relative_to(REPO)}/ names no package of amp_suite")
            continue
        names = {path.stem for path in package.rglob("*.py")} | {
            path.parent.name for path in package.rglob("*/__init__.py")
        }
        for test in sorted(folder.glob("test_*.py")):
            subject = test.stem.removeprefix("test_")
            if not any(subject == name or subject.startswith(f"{name}_") for name in names - {"__init__"}):
                strays.append(f"{test.relative_to(REPO)} names no module of amp_suite/{folder.name}")
    assert not strays, "\n".join(strays)
