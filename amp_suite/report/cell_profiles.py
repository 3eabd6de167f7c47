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

No torch here when imported (the report package's promise): a profile needs torch, so the modules
that build and run one are imported inside profile_cell, the one function that does.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from amp_suite.config.precisions import MODE_BY_NAME, REFERENCE
from amp_suite.errors import shorten

# Sources of a workload's own (generated, bundled, or its entry's): what a profile may build.
OWN_SOURCES = ("synthetic", "digits", "entry")
SHAPES_FROM = "synthetic"  # every other source is cut to the shapes the workload's generator gives
MAX_ENTRY_SHOWN = 200
# torch (2.10) logs this when torchao registers its KernelPreference enum, once per process, on
# the first float8 import: a note to torchao's authors that a user of predict can do nothing about.
LIBRARY_NOTES = (("torch.utils._pytree", "is an Enum subclass"),)


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


class _DropNote(logging.Filter):
    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words

    def filter(self, record: logging.LogRecord) -> bool:
        return self.words not in record.getMessage()


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Around a profile: the libraries' notes to their own developers (LIBRARY_NOTES, logged or
    warned as a library is imported) are dropped; every other warning still shows."""
    filters = [(logging.getLogger(name), _DropNote(words)) for name, words in LIBRARY_NOTES]
    with warnings.catch_warnings():
        for logger, drop in filters:
            warnings.filterwarnings("ignore", message=f".*{drop.words}")
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger, drop in filters:
                logger.removeFilter(drop)


def profile_cell(spec):
    """The op profile of the cell's step at its batch, in its precision, built from one sample."""
    import torch

    from amp_suite.cell.precision import make_policy
    from amp_suite.instruments.diagnostics.op_profile import profile_step
    from amp_suite.workloads import build_workload

    with quiet_libraries():
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


class Profiles:
    """Each cell's op profile, made once per model, layout, batch and the mode whose ops it runs
    (tf32 runs fp32's ops: only the math under them differs). `say`: told of each profile as it
    starts (a profile takes seconds), or None where the caller said what it profiles beforehand."""

    def __init__(self, say: Callable[[str], None] | None = None, profile: Callable = profile_cell) -> None:
        self.made: dict[tuple, Any] = {}
        self.say, self.profile = say, profile

    def of(self, spec):
        ran = spec.precision if MODE_BY_NAME[spec.precision].autocast else REFERENCE
        key = (spec.workload.model_dump_json(), spec.channels_last, spec.batch_size, ran)
        if key not in self.made:
            if self.say is not None:
                layout = " (channels_last)" if spec.channels_last else ""
                self.say(f"profiling {spec.matrix}: {spec.workload.name}{layout} at batch {spec.batch_size} in {ran}")
            self.made[key] = self.profile(spec.model_copy(update={"precision": ran}))
        return self.made[key]
