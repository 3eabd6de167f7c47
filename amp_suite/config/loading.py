"""Reading matrix files: bounded, UTF-8, YAML without alias bombs or deep nesting, one error line per problem
(amp_suite.config.problems words them)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from amp_suite.config.base import MAX_MATRIX_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES, ConfigError, shorten
from amp_suite.config.matrix import Matrix
from amp_suite.config.problems import describe_validation_error
from amp_suite.files import RefusedFile, read_limited
from amp_suite.paths import shown


def load_matrix(path: Path) -> Matrix:
    """Read and validate a matrix file: a ConfigError names every problem, a line each."""
    data = parse_yaml(read_matrix_text(path), f"matrix {shown(path)}")
    if not isinstance(data, dict):
        raise ConfigError(f"matrix {shown(path)}: expected a mapping of keys at the top, got {type(data).__name__}")
    try:  # a user workload's file entry is named from the matrix's folder
        return Matrix.model_validate(data, context={"matrix_dir": path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError(f"matrix {shown(path)}: {describe_validation_error(exc, Matrix)}") from None


def read_matrix_text(path: Path) -> str:
    """At most MAX_MATRIX_BYTES of UTF-8 from a regular file: a device, a FIFO or a huge file
    can't stall or flood us."""
    try:
        data = read_limited(path, MAX_MATRIX_BYTES)
    except RefusedFile as exc:
        raise ConfigError(f"matrix {exc}") from None
    if data is None:
        raise ConfigError(f"matrix {shown(path)}: no such file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"matrix {shown(path)}: not UTF-8 text (is it a YAML file?)") from None


def parse_yaml(text: str, label: str) -> object:
    """YAML text as data; each problem is one ConfigError line that starts with `label`: malformed,
    nested deeper than MAX_YAML_DEPTH (as written, or once its aliases expand), more than
    MAX_YAML_NODES nodes once expanded, an alias that refers to itself, or a key given twice."""
    loader = _BoundedLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_expanded(root)
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or "unparseable"
        raise ConfigError(f"{label}: malformed YAML{at}: {shorten(problem, 100)}") from None
    except _UnfitYaml as exc:
        raise ConfigError(f"{label}: {exc}") from None
    finally:
        loader.dispose()


class _UnfitYaml(Exception):
    """YAML no matrix or reference file is: too deep or too large once expanded, recursive, or with a repeated key."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting past MAX_YAML_DEPTH while it composes: its composer
    recurses once per level, so 1 KB of brackets would otherwise exhaust Python's stack."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise _UnfitYaml(f"nests deeper than {MAX_YAML_DEPTH} levels at line {line}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# YAML 1.1, which PyYAML reads, takes `1e-3` for a string: a float needs a dot there. YAML 1.2 and
# every user who writes `lr: 1e-3` take it for a number; with the schema strict, a string would be
# refused where a number goes. Floats are read as YAML 1.2 reads them (a dot or an exponent).
_BoundedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _check_expanded(root: yaml.Node) -> None:
    """Count nodes and levels as if every alias were expanded (memoised, so a "billion laughs" file
    is cheap to count) and refuse recursive aliases, which would never finish expanding. An alias
    nests its anchor's whole tree where it stands: a chain of them is deep though shallow as written."""
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in in_progress:
            raise _UnfitYaml("a YAML alias refers to itself")
        if depth + heights.get(key, 1) - 1 > MAX_YAML_DEPTH:
            raise _UnfitYaml(f"nests deeper than {MAX_YAML_DEPTH} levels once its aliases are expanded")
        if key in sizes:
            return sizes[key]
        in_progress.add(key)
        children = _children(node)
        total = 1 + sum(size(child, depth + 1) for child in children)
        in_progress.discard(key)
        if total > MAX_YAML_NODES:
            raise _UnfitYaml(f"expands to more than {MAX_YAML_NODES:,} YAML nodes (aliases included)")
        sizes[key] = total
        heights[key] = 1 + max((heights[id(child)] for child in children), default=0)
        return total

    size(root, 1)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        _check_unique_keys(node)
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_unique_keys(node: yaml.MappingNode) -> None:
    """YAML would keep the last of two equal keys without a word; a typo'd override is a bug."""
    seen: set[str] = set()
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value != "<<":
            if key.value in seen:
                raise _UnfitYaml(f"key {shorten(key.value, 40)!r} appears twice (line {key.start_mark.line + 1})")
            seen.add(key.value)
