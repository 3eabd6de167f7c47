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
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from amp_suite.config.base import MAX_PARAMETERS
from amp_suite.data import TensorData
from amp_suite.workloads.base import LoadedData, Workload, validation_sums
from amp_suite.workloads.entry import EntryError, find_entry
from amp_suite.workloads.numerics import changed_switches, numeric_state

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
    before = numeric_state()  # before the import too: a module may set them as it loads
    function = find_entry(entry)
    _check_annotation(entry, function)
    built = _called(entry, function, args)
    if changed := changed_switches(before, numeric_state()):
        raise EntryError(
            f"entry {entry} changed the fp32 math: {', '.join(changed)}; the suite sets these for each precision"
            " mode (fp32 is IEEE float32, tf32 is the TF32 mode): leave them to it"
        )
    if not isinstance(built, UserWorkload):
        raise EntryError(f"entry {entry} returned {type(built).__name__}; it must return amp_suite.UserWorkload")
    if not isinstance(built.model, nn.Module):
        raise EntryError(f"entry {entry}: model is a {type(built.model).__name__}, not a torch.nn.Module")
    _check_parameters(entry, built.model)
    for split in ("train", "validation"):
        _check_pair(entry, split, getattr(built, split))
    if not METRIC_NAME.match(built.metric_name):
        raise EntryError(f"entry {entry}: metric_name {built.metric_name!r}: lower-case letters, digits and _")
    return built


def _check_annotation(entry: str, function: Callable[..., Any]) -> None:
    """The object the module holds under the entry's name is the function its source declares (a
    name rebound after its definition, `build = os.system`, is not)."""
    returns = getattr(function, "__annotations__", {}).get("return")
    if returns is UserWorkload or (isinstance(returns, str) and returns.rsplit(".", 1)[-1] == UserWorkload.__name__):
        return
    name = entry.rsplit(":", 1)[1]
    raise EntryError(f"entry {entry}: what the module holds as {name} is not declared -> {UserWorkload.__name__}")


def _called(entry: str, function: Callable[..., Any], args: dict[str, Any]) -> object:
    """The entry's return value; a clean exit of the user's code is a failure of the entry, named."""
    try:
        return function(**args)
    except SystemExit as exc:
        raise EntryError(f"entry {entry} called sys.exit({exc.code!r}) while it was being called") from None


def _check_parameters(entry: str, model: nn.Module) -> None:
    """The limit every workload has (config.base.MAX_PARAMETERS): a user's model counted once built,
    on whatever device it was built (a meta one allocates nothing)."""
    parameters = sum(parameter.numel() for parameter in model.parameters())
    if parameters > MAX_PARAMETERS:
        raise EntryError(
            f"entry {entry} built a model of {parameters:.2e} parameters; the limit is {MAX_PARAMETERS:.0e}"
        )


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
    """`python -m amp_suite.workloads.custom REQUEST VERDICT`: call the entry once, as a cell would,
    and write its verdict, {"reason": null} or the one line that says why it can't run, to VERDICT
    (JSON). `amp-suite run` does this in a child process of its own session before any cell
    (amp_suite.cli.preflight), so that the user's code never runs in the process that keeps the
    records. The request, a JSON file, holds the entry, its args (of any size: a command line's
    arguments are limited) and the pid of the parent, whose end ends this check and its children."""
    request = json.loads(Path(argv[0]).read_text())
    _end_with_parent(int(request["parent_pid"]))
    reason = checked(request["entry"], request["args"])
    # ASCII JSON: a message of the user's with bytes that are not UTF-8 still reads back whole.
    Path(argv[1]).write_text(json.dumps({"reason": reason}))
    return 0 if reason is None else 2


def checked(entry: str, args: dict[str, Any]) -> str | None:
    """None where the entry builds a workload a cell can run, else why not, in one line."""
    try:
        built_by(entry, args)
    except EntryError as exc:
        return str(exc)
    except Exception as exc:  # the user's code raised: its type, its words and where
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f" (at {Path(frame.filename).name}:{frame.lineno})"
        return f"entry {entry} raised {type(exc).__name__}: {exc}{where}".replace("\n", " ")
    return None


def _end_with_parent(parent: int) -> None:
    """If the process that started this check ends (even by SIGKILL, which it can't act on), end
    this check's whole process group: the entry may have started processes of its own."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        if os.getpgid(0) == os.getpid():  # the leader of a group of its own, as amp-suite starts it
            os.killpg(0, signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="amp-suite-parent-watch", daemon=True).start()


if __name__ == "__main__":  # run as __main__, this file's UserWorkload is not the one entries import
    from amp_suite.workloads import custom

    code = custom.main(sys.argv[1:])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a stream the entry closed or broke
            pass
    os._exit(code)  # not waiting for threads the entry may have left running: its verdict is written
