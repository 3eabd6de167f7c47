"""Load a workload's data as Hugging Face datasets with a fixed train/validation split.

Generated and bundled sets are built once and cached on disk (`save_to_disk`) under a key that
names what built them, so every cell reads the same bytes and the record can carry their
fingerprint. The hub is only contacted for `source: hub`; everything else works offline. A local
text file is read as far as the cell's samples reach and never cached (amp_suite.data.text).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from amp_suite.config import DataConfig
from amp_suite.data.text import UnusableText, read_text
from amp_suite.paths import cache_folder

datasets.disable_progress_bars()  # cells log to files; bars only clutter them

DEFAULT_CACHE = cache_folder() / "datasets"
SPLIT_SEED = 0  # the validation split never depends on the run's seed
CACHE_VERSION = 1  # bump when a generator changes, so stale caches are not reused


class DataUnavailableError(RuntimeError):
    """The requested data can't be had here; the message says how to provide it."""


@dataclass(frozen=True)
class GeneratedSet:
    """A workload's own generated data: `build(**params)` must be deterministic."""

    build: Callable[..., dict[str, np.ndarray]]
    params: dict[str, Any]
    val_samples: int  # of the built samples, this many are held out


@dataclass(frozen=True)
class Splits:
    train: datasets.Dataset
    validation: datasets.Dataset
    description: str

    @property
    def fingerprint(self) -> str:
        both = f"{self.train._fingerprint}/{self.validation._fingerprint}"
        return hashlib.sha256(both.encode()).hexdigest()[:16]


def load_splits(config: DataConfig, generated: GeneratedSet | None = None, cache_dir: Path = DEFAULT_CACHE) -> Splits:
    """`generated` is the workload's own generator, used for source synthetic."""
    if config.source == "synthetic":
        if generated is None:
            raise ValueError("source synthetic needs the workload's generator")
        name = generated.build.__name__
        data = _cached(cache_dir, _key(name, generated.params), lambda: generated.build(**generated.params))
        return _split(data, config, f"generated:{name}", test_size=generated.val_samples)
    if config.source == "digits":
        from amp_suite.data.generated import digits

        return _split(_cached(cache_dir, _key("digits", {}), digits), config, "sklearn:digits")
    if config.source == "hub":
        return _split(_from_hub(config), config, f"hub:{config.name}" + (f"/{config.subset}" if config.subset else ""))
    if config.source == "imagefolder":
        folder = _from_local("imagefolder", config.path, data_dir=config.path)
        return _split(folder, config, f"imagefolder:{config.path}")
    return _from_text(config, generated)


def _key(name: str, params: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    return f"{name}-v{CACHE_VERSION}-{digest}"


def _cached(cache_dir: Path, key: str, build: Callable[[], dict[str, np.ndarray]]) -> datasets.Dataset:
    path = cache_dir / key
    if not (path / "state.json").is_file():
        partial = cache_dir / f".{key}.{os.getpid()}.partial"
        datasets.Dataset.from_dict(build()).save_to_disk(str(partial))
        try:
            partial.rename(path)  # atomic: readers see a whole dataset or none
        except OSError:  # another process finished first; use theirs
            shutil.rmtree(partial, ignore_errors=True)
    return datasets.load_from_disk(str(path))


def _split(
    data: datasets.Dataset | datasets.DatasetDict, config: DataConfig, description: str, test_size: int | None = None
) -> Splits:
    """The source's own validation (or test) split if it has one, else a fixed held-out fraction."""
    if isinstance(data, datasets.DatasetDict):
        held_out = next((data[name] for name in ("validation", "test") if name in data), None)
        if "train" not in data:
            raise DataUnavailableError(f"{description} has no 'train' split (it has {sorted(data)})")
        if held_out is not None:
            return Splits(data["train"], held_out, description)
        data = data["train"]
    parts = data.train_test_split(test_size=test_size or config.val_fraction, seed=SPLIT_SEED, shuffle=True)
    return Splits(parts["train"], parts["test"], description)


def _from_hub(config: DataConfig) -> datasets.DatasetDict:
    try:
        return datasets.load_dataset(config.name, config.subset)
    except Exception as exc:  # offline, unknown name, gated...: every path ends in the same advice
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise DataUnavailableError(
            f"hub dataset {config.name!r} is not available here ({first}). Provide it by running "
            f'`python -c "import datasets; datasets.load_dataset({config.name!r}, {config.subset!r})"` '
            "on a machine with network access and copying its Hugging Face cache (~/.cache/huggingface) "
            "here, or save it to a folder and use data.source imagefolder/text with data.path"
        ) from exc


def _from_text(config: DataConfig, generated: GeneratedSet | None) -> Splits:
    """A text file read only as far as the cell's blocks reach (amp_suite.data.text): the workload's
    generator is sized as the text is, in blocks of `seq_len` bytes, `samples` of them in all."""
    if generated is None or "seq_len" not in generated.params:
        raise ValueError("source text needs the workload's sizes (its generator's samples and seq_len)")
    block, blocks = generated.params["seq_len"], generated.params["samples"]
    try:
        train, validation = read_text(
            Path(config.path or ""), block, blocks - generated.val_samples, generated.val_samples, config.val_fraction
        )
    except UnusableText as exc:
        raise DataUnavailableError(f"data.path {config.path!r}: {exc}") from None
    return Splits(_in_memory(train.lines), _in_memory(validation.lines), f"text:{config.path}")


def _in_memory(lines: list[str]) -> datasets.Dataset:
    """Held in memory: from_dict writes no cache file (nothing under ~/.cache/huggingface)."""
    return datasets.Dataset.from_dict({"text": lines})


def _from_local(builder: str, path: str | None, **kwargs: str | None) -> datasets.DatasetDict:
    if path is None or not Path(path).exists():
        raise DataUnavailableError(f"data.path {path!r} does not exist (data.source {builder})")
    return datasets.load_dataset(builder, **kwargs)
