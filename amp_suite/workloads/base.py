"""What a workload provides to the loop: a model, its data, its loss and its optimizer."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from types import ModuleType

import torch
from torch import nn

from amp_suite.data import TensorData


class Workload(ABC):
    def __init__(self, config) -> None:
        self.config = config

    @abstractmethod
    def build_model(self) -> nn.Module:
        """A freshly initialised model (weights come from the global seed, never from a hub)."""

    @abstractmethod
    def make_data(self, generator: torch.Generator) -> TensorData:
        """`config.samples` learnable training samples on the CPU."""

    @abstractmethod
    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Forward pass and loss: the part that runs under autocast."""

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(model.parameters(), lr=self.config.lr)

    def to_device(self, model: nn.Module, data: TensorData, device: torch.device):
        return model.to(device), data.to(device)


def require(module: str, workload: str) -> ModuleType:
    """Import an optional heavy dependency, or say what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.split(".")[0]
        raise ImportError(f"the {workload} workload needs {package}: pip install {package} ({exc})") from exc
