"""What `amp-suite predict` profiles of a cell, and which recorded cells it may profile at all.

A record is data from wherever it was made: it says which workload a cell trained, never which
code predict should run. A workload that names an entry (the user's own model, `module:function`
or `file.py:function`) is code: predict profiles its cells only where the user names that entry
with --model, as `amp-suite run --model` runs it; the entry named is what runs (a file of the same
name and function matches: the records name the path it had on the machine that ran).

A profile needs a cell's shapes, never its data: the workload is built at one training sample,
from its own generator or bundled set (a hub set, a folder or a file a record names is not read:
the generator gives the same shapes), and the step runs on a fake batch of the cell's size
(instruments.diagnostics.op_profile). A pretrained model profiles from its config alone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import typer

from amp_suite.config.workloads import ENTRY_PATTERN
from amp_suite.errors import shorten

# Sources of a workload's own (generated, bundled, or its entry's): what a profile may build.
OWN_SOURCES = ("synthetic", "digits", "entry")
SHAPES_FROM = "synthetic"  # every other source is cut to the shapes the workload's generator gives
MAX_ENTRY_SHOWN = 200


def entry_option(value: str) -> str:
    """--model: an entry as `amp-suite run --model` takes it; a file is resolved from the working
    directory, as run resolves it."""
    if not re.fullmatch(ENTRY_PATTERN, value) or len(value) > 4096:
        raise typer.BadParameter(f"{shorten(value, 60)!r}: give module:function or file.py:function")
    where, function = value.rsplit(":", 1)
    if where.endswith(".py"):
        return f"{Path(where).expanduser().resolve()}:{function}"
    return value


def with_named_entry(workload: Any, entries: list[str]) -> tuple[Any, str | None]:
    """The workload as predict may build it, and None; or None and why not: a workload that names
    an entry runs only the one the user named that matches it, in its place."""
    entry = getattr(workload, "entry", None)
    if entry is None:
        return workload, None
    named = next((e for e in entries if _same_entry(e, entry)), None)
    if named is None:
        shown = shorten(entry, MAX_ENTRY_SHOWN)
        copy = " (or your copy of that file)" if entry.rsplit(":", 1)[0].endswith(".py") else ""
        return None, (
            f"its records name code to run (entry {shown}); predict runs a model's code only where you name"
            f" it: --model {shown}{copy}"
        )
    return workload.model_copy(update={"entry": named}), None


def _same_entry(named: str, recorded: str) -> bool:
    """The same module and function; or, for files, the same file name and function."""
    if named == recorded:
        return True
    (where, function), (recorded_where, recorded_function) = named.rsplit(":", 1), recorded.rsplit(":", 1)
    both_files = where.endswith(".py") and recorded_where.endswith(".py")
    return both_files and function == recorded_function and Path(where).name == Path(recorded_where).name


def one_sample(workload: Any) -> Any:
    """The workload's config at one training and one validation sample, from a source of its own,
    and without weights to load: all a profile reads of its data and model is their shapes."""
    data = workload.data
    if data.source not in OWN_SOURCES:
        data = data.model_copy(update={"source": SHAPES_FROM, "name": None, "subset": None, "path": None})
    update: dict[str, Any] = {"samples": 1, "data": data.model_copy(update={"val_samples": 1})}
    if getattr(workload, "pretrained", False):
        update["pretrained"] = False
    return workload.model_copy(update=update)


def offline_unless_asked(specs: list) -> None:
    """A profile reads no hub data set (one_sample); only a model named by its Hub id needs the hub,
    for its config. Without one, no library waits on it (~25 s of retries before it fails)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if not any(one_sample(spec.workload).uses_hub for spec in specs):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def profile_cell(spec):
    """The op profile of the cell's step at its batch, in its precision, built from one sample."""
    import torch

    from amp_suite.cell.precision import make_policy
    from amp_suite.instruments.diagnostics.op_profile import profile_step
    from amp_suite.workloads import build_workload

    workload = build_workload(one_sample(spec.workload), spec.channels_last)
    torch.manual_seed(spec.seed)  # a user's entry builds its model (and may draw its data) here
    example = workload.load_data().train  # one sample: the shapes and dtypes of the cell's batches
    return profile_step(
        lambda: workload.build_model(example),
        workload.loss,
        lambda: make_policy(spec.precision, "cpu"),
        workload.make_optimizer,
        example.inputs,
        example.targets,
        batch_size=spec.batch_size,
        memory_format=workload.memory_format,
    )
