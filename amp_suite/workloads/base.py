"""What a workload provides to the loop: data, a model, its loss, its optimizer, its evaluation."""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import datasets
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from amp_suite.data import TensorData
from amp_suite.data.convert import check_classes
from amp_suite.data.sources import GeneratedSet, load_splits


@dataclass(frozen=True)
class LoadedData:
    train: TensorData
    validation: TensorData
    source: str  # e.g. "sklearn:digits", "hub:cifar10"
    fingerprint: str  # of the dataset splits the tensors came from

    def to(self, device: torch.device, memory_format: torch.memory_format = torch.preserve_format) -> LoadedData:
        train, validation = self.train.to(device, memory_format), self.validation.to(device, memory_format)
        return LoadedData(train, validation, self.source, self.fingerprint)


class Workload(ABC):
    """What the loop and the pipeline need of any workload, a reference one or the user's own
    (amp_suite.workloads.custom): data, a fresh model, the loss under autocast, an evaluation."""

    primary_metric = "val_accuracy"  # tables label it with its config's metric_label
    higher_is_better = True

    def __init__(self, config, channels_last: bool = False) -> None:
        if channels_last and not config.image_inputs:
            raise ValueError(f"channels_last applies to image inputs; the {config.workload} workload has none")
        self.config = config
        # Model and data are converted once (batches cut from the data keep its layout), so the
        # timed steps copy nothing.
        self.memory_format = torch.channels_last if channels_last else torch.preserve_format

    @abstractmethod
    def load_data(self) -> LoadedData:
        """Training and validation tensors on the CPU, the same for every precision (the global
        seed is the cell's when it is called)."""

    @abstractmethod
    def build_model(self, train: TensorData) -> nn.Module:
        """A freshly initialised model (weights come from the global seed, never from a hub)."""

    @abstractmethod
    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward pass and training loss: the part that runs under autocast."""

    @abstractmethod
    def evaluate(
        self, model: nn.Module, data: TensorData, batch_size: int, context: Callable[[], AbstractContextManager]
    ) -> dict[str, float]:
        """Validation metrics, including `primary_metric`; `context` is the policy's forward context."""

    def chance_metric(self, validation: TensorData) -> float | None:
        """`primary_metric` for a model that learned only how often each label occurs in `validation`:
        below it, parity with fp32 means nothing. None where the workload can't say (a user's metric)."""
        return None

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        """The optimizer, in the implementation the config asks for: fused where `fused_optimizer`
        is set, and then proved so (never another), else torch's default."""
        wanted = {"fused": True} if self.config.fused_optimizer else {}
        return checked_implementation(self.optimizer(model.parameters(), **wanted), self.config.fused_optimizer)

    def optimizer(self, parameters: Iterable[nn.Parameter], **implementation: bool) -> torch.optim.Optimizer:
        """A fresh optimizer over `parameters`; `implementation` is torch.optim's (fused=True)."""
        return torch.optim.AdamW(parameters, lr=self.config.lr, **implementation)

    def to_device(self, model: nn.Module, device: torch.device) -> nn.Module:
        return model.to(device, memory_format=self.memory_format)


class SourcedWorkload(Workload):
    """A reference workload: its data come from the suite's sources (its own generator, digits, the
    hub, a folder, text files), converted to the tensors it trains on."""

    def load_data(self) -> LoadedData:
        """Training and validation tensors on the CPU, the same for every precision and seed."""
        c = self.config
        params = {"samples": c.samples + c.data.val_samples, **self.generator_params()}
        splits = load_splits(c.data, GeneratedSet(self.generator, params, c.data.val_samples))
        train = self.tensors(splits.train, c.samples)
        self.check(train, splits.description)
        validation = self.tensors(splits.validation, c.data.val_samples)
        return LoadedData(train, validation, splits.description, splits.fingerprint)

    @staticmethod
    @abstractmethod
    def generator(**params: Any) -> dict[str, np.ndarray]:
        """The workload's own generated data set (data.source synthetic)."""

    @abstractmethod
    def generator_params(self) -> dict[str, Any]:
        """Arguments for `generator` besides the sample count."""

    @abstractmethod
    def tensors(self, split: datasets.Dataset, limit: int) -> TensorData:
        """At most `limit` samples of a split, as the tensors the model trains on."""

    @abstractmethod
    def check(self, train: TensorData, description: str) -> None:
        """Raise if the data does not fit the configuration (classes, vocabulary)."""


class Classifier(SourcedWorkload):
    """Cross-entropy on logits; validation accuracy is the primary metric."""

    @abstractmethod
    def logits(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor: ...

    def check(self, train: TensorData, description: str) -> None:
        check_classes(train, self.config.num_classes, description)

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.logits(model, inputs), targets)

    def chance_metric(self, validation: TensorData) -> float | None:
        return commonest_share(validation.targets)

    def evaluate(self, model, data, batch_size, context) -> dict[str, float]:
        def sums(inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
            with context():
                logits = self.logits(model, inputs)
            return F.cross_entropy(logits.float(), targets, reduction="sum"), (logits.argmax(dim=1) == targets).sum()

        loss_sum, correct = validation_sums(model, data, batch_size, sums)
        return {"val_loss": loss_sum / len(data), "val_accuracy": correct / len(data)}


def checked_implementation(optimizer: torch.optim.Optimizer, fused: bool) -> torch.optim.Optimizer:
    """The optimizer, if it is fused where `fused` asks for it. torch checks the device itself, in
    the first step (a CPU and CUDA both have fused AdamW and SGD): an optimizer built otherwise,
    a user's own, say, is refused here rather than measured as the fused one."""
    if fused and not optimizer.defaults.get("fused"):
        raise ValueError(
            f"fused_optimizer: true, but the optimizer built is not fused ({type(optimizer).__name__},"
            f" fused={optimizer.defaults.get('fused')}): build it with fused=True, or leave fused_optimizer out"
        )
    return optimizer


def commonest_share(labels: torch.Tensor) -> float:
    """The accuracy of always guessing the commonest label: a model that learned nothing else."""
    return (torch.bincount(labels.flatten()).max() / labels.numel()).item()


def unigram_perplexity(tokens: torch.Tensor) -> float:
    """The perplexity of predicting every token by its frequency alone: a model that learned nothing else."""
    counts = torch.bincount(tokens.flatten()).double()
    shares = counts[counts > 0] / tokens.numel()
    return math.exp(-(shares * shares.log()).sum().item())


def in_batches(data: TensorData, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """A validation set in order, `batch_size` samples at a time (the last batch may be smaller)."""
    for start in range(0, len(data), batch_size):
        yield data.inputs[start : start + batch_size], data.targets[start : start + batch_size]


# What one validation batch adds to the totals, from its (inputs, targets): a loss sum, a count of hits.
BatchSums = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]


@torch.no_grad()
def validation_sums(model: nn.Module, data: TensorData, batch_size: int, sums: BatchSums) -> tuple[float, ...]:
    """`sums` of each validation batch, added up over the set in order, with the model in eval mode.
    Read once, at the end: .item() synchronises, and evaluation runs after the timed steps."""
    model.eval()
    totals: tuple[torch.Tensor, ...] = ()
    for inputs, targets in in_batches(data, batch_size):
        batch = sums(inputs, targets)
        totals = tuple(total + value for total, value in zip(totals, batch, strict=True)) if totals else batch
    model.train()
    return tuple(total.item() for total in totals)


def require(module: str, workload: str) -> ModuleType:
    """Import an optional heavy dependency, or say what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0]
        raise ImportError(f"the {workload} workload needs {package}: pip install {package} ({exc})") from exc
