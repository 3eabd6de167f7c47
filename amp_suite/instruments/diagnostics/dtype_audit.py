"""What autocast actually did: every aten op of one training step, with the dtypes it saw.

The article's "checking that it actually worked" step, made exact: a TorchDispatchMode sits
below autocast, so it sees each op after autocast has cast its inputs. Per op we report calls,
input and output dtypes, and where it ran:

    lower     a floating output in float16/bfloat16 (autocast lowered it)
    promoted  lower-precision floating inputs, float32 output (autocast or the op upcast it)
    float32   float32 in, float32 out
    other     no floating-point output (indexing, shapes, integer ops)

and the checks: parameters and gradients stay float32, the loss is float32, and every matmul
and convolution in the forward pass produced the policy's compute dtype. fp8's float8 matmuls
(torch._scaled_mm, below torchao's tensor subclass where a dispatch mode can't see them) are
counted from torch._scaled_mm itself and listed as ops of their own, "ran in" float8; an fp8
policy's step must run some in its forward pass.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from amp_suite.config.precisions import MODE_BY_NAME
from amp_suite.instruments.diagnostics import PrecisionStep
from amp_suite.instruments.diagnostics.scaled_mm import ScaledMatmuls, scaled_matmuls

LOWER = (torch.float16, torch.bfloat16)
# Matmul-like and convolution ops: the ones autocast is meant to run in the lower dtype.
MATMUL_CONV_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "convolution", "_convolution", "linear", "matmul"})
ATTENTION_PREFIX = "_scaled_dot_product"
SCALED_MM = "_scaled_mm"  # fp8's float8 matmul (counted by diagnostics.scaled_mm)


@dataclass
class OpStats:
    phase: str
    op: str
    calls: int = 0
    input_dtypes: set[str] = field(default_factory=set)
    output_dtypes: set[str] = field(default_factory=set)
    first_output_dtypes: set[str] = field(default_factory=set)  # attention also returns fp32 statistics
    ran_in: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "op": self.op,
            "calls": self.calls,
            "input_dtypes": sorted(self.input_dtypes),
            "output_dtypes": sorted(self.output_dtypes),
            "ran_in": "+".join(sorted(self.ran_in)),
        }


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.phase = "forward"
        self.ops: dict[tuple[str, str], OpStats] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        stats = self.ops.setdefault((self.phase, name), OpStats(self.phase, name))
        inputs = [t.dtype for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        stats.calls += 1
        stats.input_dtypes.update(_name(d) for d in inputs)
        stats.output_dtypes.update(_name(d) for d in outputs)
        stats.first_output_dtypes.update(_name(d) for d in outputs[:1])
        stats.ran_in.add(_classify(inputs, outputs))
        return out

    def add_scaled(self, phase: str, seen: ScaledMatmuls) -> None:
        """torch._scaled_mm's calls, as the op they are."""
        if not seen.calls:
            return
        stats = self.ops.setdefault((phase, SCALED_MM), OpStats(phase, SCALED_MM))
        stats.calls += len(seen.calls)
        for a, b, out in seen.calls:
            stats.input_dtypes.update((a, b))
            stats.output_dtypes.add(out)
            stats.first_output_dtypes.add(out)
            stats.ran_in.add("float8" if a.startswith("float8") and b.startswith("float8") else "other")


def audit_step(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor],
    policy: PrecisionStep,
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> dict[str, Any]:
    """Forward + loss under the policy and its backward, on a copy of the model (left untouched)."""
    model = copy.deepcopy(model)
    recorder = _Recorder()
    with recorder:
        with scaled_matmuls() as forward_fp8, policy.forward_context():
            loss = loss_fn(model, inputs, targets)
        recorder.phase = "backward"
        with scaled_matmuls() as backward_fp8:
            policy.backward(loss)
    recorder.add_scaled("forward", forward_fp8)
    recorder.add_scaled("backward", backward_fp8)
    ops = sorted(recorder.ops.values(), key=lambda s: (s.phase != "forward", s.op))
    lowered = [s for s in ops if s.phase == "forward" and _is_matmul_or_conv(s.op)]
    expected = _name(policy.compute_dtype)
    checks = {
        "parameters_float32": all(p.dtype == torch.float32 for p in model.parameters()),
        "gradients_float32": all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None),
        "loss_float32": loss.dtype == torch.float32,
        "matmul_conv_in_compute_dtype": bool(lowered) and all(s.first_output_dtypes == {expected} for s in lowered),
    }
    if MODE_BY_NAME[policy.name].fp8_recipe:
        checks["fp8_scaled_matmuls"] = bool(forward_fp8.float8)
    return {
        "precision": policy.name,
        "compute_dtype": expected,
        "loss_dtype": _name(loss.dtype),
        "checks": checks,
        "ops": [s.as_dict() for s in ops],
    }


def _is_matmul_or_conv(op: str) -> bool:
    return op in MATMUL_CONV_OPS or op.startswith(ATTENTION_PREFIX)


def _classify(inputs: list[torch.dtype], outputs: list[torch.dtype]) -> str:
    floating_out = [d for d in outputs if d.is_floating_point]
    if not floating_out:
        return "other"
    if any(d in LOWER for d in floating_out):
        return "lower"
    if any(d in LOWER for d in inputs):
        return "promoted"
    return "float32" if all(d == torch.float32 for d in floating_out) else _name(floating_out[0])


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
