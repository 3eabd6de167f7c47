"""Find the op that first produced inf/NaN, before blaming AMP.

Training keeps running without a per-step sync; afterwards the cell checks its losses (and, for
precisions without a GradScaler, its gradient norms) once. If a step went non-finite, the cell is
rebuilt from the same seed, replayed to just before that step, and the step is run once more
with hooks on every module and parameter: the first module whose forward output is non-finite
is named, failing that the first module whose input gradient is, failing that the first
parameter whose gradient is. If none is, the cell says so (the loss function, or a gradient
norm that overflowed although every gradient is finite).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class NonFiniteSite:
    module: str  # dotted name within the model ("" is the model itself), or a parameter's name
    kind: str  # the module's class, e.g. "Linear", or "parameter"
    phase: str  # "forward", "backward" (a module's input gradient) or "gradient" (a parameter's)

    def describe(self, step: int) -> str:
        name = self.module or "<model>"
        if self.phase == "gradient":
            return f"first non-finite gradient of parameter '{name}' at step {step}"
        return f"first non-finite {self.phase} output in module '{name}' ({self.kind}) at step {step}"


def first_nonfinite_step(losses: torch.Tensor, grad_norms: torch.Tensor | None) -> int | None:
    """Index of the first step whose loss (or gradient norm, when given) is inf/NaN. Synchronises."""
    bad = ~torch.isfinite(losses)
    if grad_norms is not None:
        bad |= ~torch.isfinite(grad_norms)
    indices = bad.nonzero()
    return int(indices[0, 0]) if len(indices) else None


@contextmanager
def watch_nonfinite(model: nn.Module) -> Iterator[list[NonFiniteSite]]:
    """Hooks on every module and parameter; yields the sites in the order they went non-finite."""
    found: list[NonFiniteSite] = []
    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_hook(_forward_hook(name, found)))
        handles.append(module.register_full_backward_hook(_backward_hook(name, found)))
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            handles.append(parameter.register_hook(_gradient_hook(name, found)))
    try:
        with warnings.catch_warnings():
            # Modules whose inputs need no gradient (the first layer) still get their hook called.
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            yield found
    finally:
        for handle in handles:
            handle.remove()


def first_site(found: list[NonFiniteSite]) -> NonFiniteSite | None:
    """Forward beats backward: a NaN born in the forward pass is the cause of the backward's.
    In the backward pass, a module's input gradient comes before the parameter gradients it feeds."""
    for phase in ("forward", "backward", "gradient"):
        sites = [site for site in found if site.phase == phase]
        if sites:
            return sites[0]
    return None


def _forward_hook(name: str, found: list[NonFiniteSite]):
    def hook(module: nn.Module, args: object, output: object) -> None:
        # Hooks fire as modules finish, innermost first: the first hit is where the NaN was born.
        if not any(site.phase == "forward" for site in found) and _has_nonfinite(output):
            found.append(NonFiniteSite(name, type(module).__name__, "forward"))

    return hook


def _backward_hook(name: str, found: list[NonFiniteSite]):
    def hook(module: nn.Module, grad_input: object, grad_output: object) -> None:
        if not any(site.phase == "backward" for site in found) and _has_nonfinite(grad_input):
            found.append(NonFiniteSite(name, type(module).__name__, "backward"))

    return hook


def _gradient_hook(name: str, found: list[NonFiniteSite]):
    def hook(gradient: torch.Tensor) -> None:
        if not any(site.phase == "gradient" for site in found) and _has_nonfinite(gradient):
            found.append(NonFiniteSite(name, "parameter", "gradient"))

    return hook


def _has_nonfinite(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        # .item() syncs; this only runs during the replay of a step that already failed.
        return value.is_floating_point() and not bool(torch.isfinite(value).all())
    if isinstance(value, dict):
        return any(_has_nonfinite(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return any(_has_nonfinite(v) for v in value)
    return False
