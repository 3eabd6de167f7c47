"""The user's own model, measured like a reference workload: `workload: custom` in a matrix, or
`amp-suite run --model ENTRY`.

The entry is a function that returns a UserWorkload: the model, its training and validation data
as (inputs, targets) tensors, and optionally its loss, its validation metric and its optimizer.
It runs in each cell's process, after the cell's seed is set, so every precision of a seed starts
from the same weights; the suite keeps everything else (device, precision policy, batch order,
timing, memory, parity, MLflow).

    # model.py
    import torch
    from amp_suite import UserWorkload

    def build(width: int = 32) -> UserWorkload:
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, width), torch.nn.ReLU(),
                                    torch.nn.Linear(width, 10))
        inputs, targets = torch.randn(1200, 8, 8), torch.randint(0, 10, (1200,))
        return UserWorkload(model, train=(inputs[:1000], targets[:1000]), validation=(inputs[1000:], targets[1000:]))
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from amp_suite.data import TensorData
from amp_suite.workloads.base import LoadedData, Workload, validation_sums
from amp_suite.workloads.entry import EntryError, find_entry

METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The share of the batch whose largest logit is its label."""
    return (outputs.argmax(dim=-1) == targets).float().mean()


@dataclass(frozen=True)
class UserWorkload:
    """What a user's entry returns.

    model: a freshly initialised nn.Module (the suite moves it to the device and converts it).
    train, validation: (inputs, targets) tensors on the CPU; the suite batches them, in the same
        order for every precision, and caps them at the workload's `samples` and `val_samples`.
    loss(outputs, targets): the training loss, a scalar tensor; runs under autocast with the
        forward pass (default: cross-entropy over logits).
    metric(outputs, targets): the validation metric of one batch, a mean over its samples
        (default: accuracy); the suite averages it over the validation set, weighting by batch.
    metric_name: recorded as val_<metric_name>, labelled <metric_name> in tables; higher_is_better: the
        metric's direction.
    optimizer(parameters): default AdamW at the workload's `lr`.
    """

    model: nn.Module
    train: tuple[torch.Tensor, torch.Tensor]
    validation: tuple[torch.Tensor, torch.Tensor]
    loss: Callable[[Any, torch.Tensor], torch.Tensor] = F.cross_entropy
    metric: Callable[[Any, torch.Tensor], torch.Tensor | float] = accuracy
    metric_name: str = "accuracy"
    higher_is_better: bool = True
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None


def built_by(entry: str, args: dict[str, Any]) -> UserWorkload:
    """Call the entry with `args` and check what it returned; EntryError says what is wrong."""
    function = find_entry(entry)
    built = function(**args)
    if not isinstance(built, UserWorkload):
        raise EntryError(f"entry {entry} returned {type(built).__name__}; it must return amp_suite.UserWorkload")
    if not isinstance(built.model, nn.Module):
        raise EntryError(f"entry {entry}: model is a {type(built.model).__name__}, not a torch.nn.Module")
    for split in ("train", "validation"):
        _check_pair(entry, split, getattr(built, split))
    if not METRIC_NAME.match(built.metric_name):
        raise EntryError(f"entry {entry}: metric_name {built.metric_name!r}: lower-case letters, digits and _")
    return built


def _check_pair(entry: str, split: str, pair: object) -> None:
    if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(t, torch.Tensor) for t in pair)):
        raise EntryError(f"entry {entry}: {split} must be an (inputs, targets) pair of tensors")
    inputs, targets = pair
    if len(inputs) != len(targets) or len(inputs) == 0:
        raise EntryError(f"entry {entry}: {split} has {len(inputs)} inputs and {len(targets)} targets")


class CustomWorkload(Workload):
    def __init__(self, config, channels_last: bool = False) -> None:
        super().__init__(config, channels_last)
        self._built: UserWorkload | None = None

    @property
    def built(self) -> UserWorkload:
        if self._built is None:
            self._built = built_by(self.config.entry, self.config.args)
        return self._built

    @property
    def primary_metric(self) -> str:  # type: ignore[override]
        return f"val_{self.built.metric_name}"

    @property
    def higher_is_better(self) -> bool:  # type: ignore[override]
        return self.built.higher_is_better

    def load_data(self) -> LoadedData:
        c, built = self.config, self.built
        train = TensorData(*(t[: c.samples].contiguous() for t in built.train))
        validation = TensorData(*(t[: c.data.val_samples].contiguous() for t in built.validation))
        return LoadedData(train, validation, f"entry {c.entry}", _fingerprint(train, validation))

    def build_model(self, train: TensorData) -> nn.Module:
        return self.built.model

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.built.loss(model(inputs), targets)

    def evaluate(self, model, data, batch_size, context) -> dict[str, float]:
        def sums(inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
            with context():
                outputs = model(inputs)
                loss = self.built.loss(outputs, targets)
            metric = torch.as_tensor(self.built.metric(outputs, targets), dtype=torch.float64)
            return loss.float() * len(inputs), metric * len(inputs)

        loss_sum, metric_sum = validation_sums(model, data, batch_size, sums)
        metric = metric_sum / len(data)
        if not math.isfinite(metric):
            name, entry = self.built.metric_name, self.config.entry
            raise ValueError(f"the metric {name} of {entry} is {metric}: it must be a finite number")
        return {"val_loss": loss_sum / len(data), self.primary_metric: metric}

    def optimizer(self, parameters: Iterable[nn.Parameter], **implementation: bool) -> torch.optim.Optimizer:
        if self.built.optimizer is None:
            return super().optimizer(parameters, **implementation)
        return self.built.optimizer(parameters)  # the entry's own: make_optimizer checks it is as asked


def _fingerprint(train: TensorData, validation: TensorData) -> str:
    digest = hashlib.sha256()
    for tensor in (train.inputs, train.targets, validation.inputs, validation.targets):
        digest.update(str((tuple(tensor.shape), tensor.dtype)).encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


WORKLOAD = CustomWorkload


def main(argv: list[str]) -> int:
    """`python -m amp_suite.workloads.custom ENTRY ARGS_JSON`: call the entry once, as a cell would,
    and say in one line (stderr, exit 2) why it can't run. `amp-suite run` does this in a child
    process before any cell, so that the user's code never runs in the process that keeps the
    records."""
    entry, args = argv[0], json.loads(argv[1])
    try:
        built_by(entry, args)
    except EntryError as exc:
        print(exc, file=sys.stderr)
        return 2
    except Exception as exc:  # the user's code raised: its type, its words and where
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f" (at {Path(frame.filename).name}:{frame.lineno})"
        print(f"entry {entry} raised {type(exc).__name__}: {exc}{where}".replace("\n", " "), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # run as __main__, this file's UserWorkload is not the one entries import
    from amp_suite.workloads import custom

    sys.exit(custom.main(sys.argv[1:]))
