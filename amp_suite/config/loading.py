"""Reading matrix files: bounded, UTF-8, YAML without alias bombs, one error line per problem."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from amp_suite.config.base import MAX_MATRIX_BYTES, MAX_YAML_NODES, ConfigError, shorten
from amp_suite.config.matrix import Matrix
from amp_suite.config.workloads import WORKLOADS
from amp_suite.files import RefusedFile, read_limited
from amp_suite.paths import shown


def load_matrix(path: Path) -> Matrix:
    """Read and validate a matrix file; every problem becomes one ConfigError line."""
    data = _parse_yaml(path, read_matrix_text(path))
    if not isinstance(data, dict):
        raise ConfigError(f"matrix {shown(path)}: expected a mapping of keys at the top, got {type(data).__name__}")
    try:  # a user workload's file entry is named from the matrix's folder
        return Matrix.model_validate(data, context={"matrix_dir": path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError(f"matrix {shown(path)}: {describe_validation_error(exc)}") from None


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


def _parse_yaml(path: Path, text: str) -> object:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None:
            _check_expanded_size(root)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or "unparseable"
        raise ConfigError(f"matrix {shown(path)}: malformed YAML{at}: {shorten(problem, 100)}") from None
    except _NotAMatrix as exc:
        raise ConfigError(f"matrix {shown(path)}: {exc}") from None


class _NotAMatrix(Exception):
    """The YAML can't be a matrix: too large once expanded, recursive, or with a repeated key."""


def _check_expanded_size(root: yaml.Node) -> None:
    """Count nodes as if every alias were expanded (memoised, so a "billion laughs" file is cheap
    to count) and refuse recursive aliases, which would never finish expanding."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in in_progress:
            raise _NotAMatrix("a YAML alias refers to itself")
        in_progress.add(key)
        if isinstance(node, yaml.MappingNode):
            _check_unique_keys(node)
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        in_progress.discard(key)
        if total > MAX_YAML_NODES:
            raise _NotAMatrix(f"expands to more than {MAX_YAML_NODES:,} YAML nodes (aliases included)")
        sizes[key] = total
        return total

    size(root)


def _check_unique_keys(node: yaml.MappingNode) -> None:
    """YAML would keep the last of two equal keys without a word; a typo'd override is a bug."""
    seen: set[str] = set()
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value != "<<":
            if key.value in seen:
                raise _NotAMatrix(f"key {shorten(key.value, 40)!r} appears twice (line {key.start_mark.line + 1})")
            seen.add(key.value)


def describe_validation_error(exc: ValidationError) -> str:
    """The first pydantic error as 'field.path: message (got value)', plus a count of the rest."""
    errors = exc.errors()
    first = errors[0]
    loc = [shorten(str(part), 40) for part in first["loc"] if part not in WORKLOADS][:8]
    if first["type"] == "union_tag_invalid":
        loc.append("workload")
    location = ".".join(loc)
    message = shorten(first["msg"].removeprefix("Value error, "), 300)
    got = first.get("input")
    shown = "" if first["type"] in ("missing",) or isinstance(got, (dict, list)) else f" (got {shorten(repr(got), 60)})"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{location}: {message}{shown}{more}" if location else f"{message}{shown}{more}"
