"""The package's shape, as its docstrings state it: what says it needs no torch imports without it,
and no module imports itself back through another."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "amp_suite"
TORCH_FREE = re.compile(r"No torch here|stays torch-free")  # how a module, or a package's __init__, says it


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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


ANALYSIS = ("amp_suite.analysis", "amp_suite.report")


def test_no_analysis_module_names_a_workload_or_a_precision():
    """The claims and the report read the traits workloads and precision modes declare
    (config.workloads, config.precisions), so that a new one is judged without editing them."""
    from amp_suite.config.precisions import PRECISIONS
    from amp_suite.config.workloads import WORKLOADS

    named = set(PRECISIONS) | set(WORKLOADS)
    found = [
        f"{name}:{node.lineno}: {node.value!r}"
        for name, tree in modules().items()
        if name.startswith(ANALYSIS)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in named
    ]
    assert not found, "\n".join(found)


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
