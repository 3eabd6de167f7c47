"""A config's problems in words: every one of them (up to MAX_SHOWN), each on its own line.

Pydantic reports a misspelt key twice, as an extra input and as the field it was meant to be,
"Field required": the second is what a reader sees first, and it sends them looking for a line
that is there. Here the two are one problem, said as the typo with the key it was likely meant to
be; a key that is missing is said to be required, and a name that is not one of the choices gets
its nearest valid names. No torch here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import get_args

from pydantic import BaseModel, ValidationError

from amp_suite.config.precisions import PRECISIONS
from amp_suite.config.workloads import WORKLOAD_CONFIG_BY_NAME, WORKLOADS
from amp_suite.errors import shorten

MAX_SHOWN = 5  # problems listed in full; the rest are counted
MAX_KEY = 40  # characters of a user's key or name echoed back
# What a choice among these names is called, from the registries that own the names.
KINDS = {frozenset(PRECISIONS): "precision mode", frozenset(WORKLOADS): "workload"}


def close_names(given: str, valid: Iterable[str]) -> list[str]:
    """The valid names `given` was likely meant to be: those it is the first part of (fp8 ->
    fp8-tensorwise, fp8-rowwise: difflib finds neither), else difflib's nearest three."""
    valid = list(dict.fromkeys(valid))
    extended = [name for name in valid if name.startswith(f"{given}-")]
    return extended or difflib.get_close_matches(given, valid, n=3)


def did_you_mean(given: str, valid: Iterable[str]) -> str:
    """The hint ": did you mean 'batch_sizes'?", or "" where no valid name is close."""
    close = close_names(given, valid)
    return f": did you mean {' or '.join(repr(name) for name in close)}?" if close else ""


def not_among(given: str, kind: str, runs: list[str], known: Iterable[str]) -> str:
    """Why `given` is not one of the names a matrix runs: a name the registry knows that the matrix
    leaves out, or a name nothing knows, with its nearest ones (the matrix's first)."""
    if given in known:
        return f"{given} is a {kind} this matrix does not run"
    hint = did_you_mean(given, runs) or did_you_mean(given, known)
    return f"no {kind} {shorten(given, MAX_KEY)!r}{hint}"


def describe_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """Every problem of a validation, in words: one line when there is one, else a count and a line
    each (up to MAX_SHOWN, then how many more). `model` is the validated class: with it, a misspelt
    key with no missing field to pair with still gets the nearest of its model's keys."""
    problems = _problems(exc.errors(), model)
    if len(problems) == 1:
        return problems[0]
    shown = [f"  {problem}" for problem in problems[:MAX_SHOWN]]
    more = [f"  and {len(problems) - MAX_SHOWN} more"] if len(problems) > MAX_SHOWN else []
    return "\n".join([f"{len(problems)} problems:", *shown, *more])


def _problems(errors: list[dict], model: type[BaseModel] | None) -> list[str]:
    """One line per problem: a misspelt key and the missing field it was meant to be are said once,
    as the typo, where the missing field was reported."""
    missing = {(err["loc"][:-1], err["loc"][-1]) for err in errors if err["type"] == "missing"}
    meant: dict[tuple, str] = {}  # (parent, missing field) -> the key that was likely meant as it
    for err in errors:
        if err["type"] == "extra_forbidden":
            parent, key = err["loc"][:-1], str(err["loc"][-1])
            close = close_names(key, [field for where, field in missing if where == parent])
            if close and (parent, close[0]) not in meant:
                meant[(parent, close[0])] = key
    paired = {(parent, key) for (parent, _), key in meant.items()}
    lines = []
    for err in errors:
        loc = err["loc"]
        if err["type"] == "missing" and (loc[:-1], loc[-1]) in meant:
            typo = shorten(meant[(loc[:-1], loc[-1])], MAX_KEY)
            lines.append(_at(loc[:-1], f"unknown key {typo!r}: did you mean {loc[-1]!r}?"))
        elif not (err["type"] == "extra_forbidden" and (loc[:-1], str(loc[-1])) in paired):
            lines.append(_problem(err, model))
    return lines


def _problem(err: dict, model: type[BaseModel] | None) -> str:
    kind, loc = err["type"], err["loc"]
    if kind == "missing":
        return _at(loc[:-1], f"{loc[-1]!r} is required")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        return _at(loc[:-1], f"unknown key {shorten(key, MAX_KEY)!r}{did_you_mean(key, _keys_at(model, loc[:-1]))}")
    if kind == "union_tag_not_found":
        return _at(loc, _no_tag(err))
    if kind == "union_tag_invalid":
        return _at((*loc, "workload"), _not_a_choice(err["ctx"]["tag"], err["ctx"]["expected_tags"]))
    if kind == "literal_error" and isinstance(err.get("input"), str):
        return _at(loc, _not_a_choice(err["input"], err["ctx"]["expected"]))
    message = shorten(err["msg"].removeprefix("Value error, "), 300)
    got = err.get("input")
    return _at(loc, message if isinstance(got, (dict, list)) else f"{message} (got {shorten(repr(got), 60)})")


def _no_tag(err: dict) -> str:
    """A workload without its `workload` key: a key close to it is the typo; else it is required."""
    field = err["ctx"]["discriminator"].strip("'")
    given = err.get("input")
    keys = [str(key) for key in given] if isinstance(given, dict) else []
    typo = next((key for key in keys if close_names(key, [field])), None)
    if typo is not None:
        return f"unknown key {shorten(typo, MAX_KEY)!r}: did you mean {field!r}?"
    return f"{field!r} is required (one of {', '.join(WORKLOADS)})"


def _not_a_choice(given: str, expected: str) -> str:
    """A name that is none of pydantic's "'a', 'b' or 'c'", with the nearest of them."""
    choices = re.findall(r"'([^']*)'", expected)
    kind = KINDS.get(frozenset(choices), "value")
    return f"unknown {kind} {shorten(given, MAX_KEY)!r}{did_you_mean(given, choices)} (choose from {expected})"


def _at(loc: tuple, text: str) -> str:
    """'workloads.0.batch_sizes: text': the location without the workload's tag pydantic adds."""
    parts = [shorten(str(part), MAX_KEY) for part in loc if part not in WORKLOAD_CONFIG_BY_NAME][:8]
    return f"{'.'.join(parts)}: {text}" if parts else text


def _keys_at(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The keys of the model found at `loc` from `model` (workloads.0.mlp -> MLPConfig's)."""
    models = [model] if model is not None else []
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list: the same models
        tagged = WORKLOAD_CONFIG_BY_NAME.get(part) if isinstance(part, str) else None
        if tagged in models:
            models = [tagged]
            continue
        models = [found for m in models if part in m.model_fields for found in _models(m.model_fields[part].annotation)]
    return list(models[0].model_fields) if len(models) == 1 else []


def _models(annotation: object) -> list[type[BaseModel]]:
    """The models a field's type holds, through Optional, unions, Annotated and lists."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models(arg)]
