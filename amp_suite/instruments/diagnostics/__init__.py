"""Checks that explain what reduced precision did to a model, and the step they run it with."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


class PrecisionStep(Protocol):
    """What a diagnostic needs of a precision policy to run one training step as the cell does:
    the forward context, the backward, and which mode and compute dtype that is. The cell's policies
    (amp_suite.cell.precision) are these; instruments sit below the cell and never import it."""

    name: str
    compute_dtype: torch.dtype

    def forward_context(self) -> AbstractContextManager[object]: ...
    def backward(self, loss: torch.Tensor) -> None: ...
