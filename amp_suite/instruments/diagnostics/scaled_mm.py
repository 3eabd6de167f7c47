"""Which float8 matmuls ran: every torch._scaled_mm call, with its operands' dtypes.

fp8 training (torchao.float8) multiplies Float8TrainingTensor subclasses: a dispatch mode sees an
ordinary `mm` on them (the subclass unwraps below it), and the float8 matmul it becomes is
torch._scaled_mm, called from Python inside torchao. So the count comes from torch._scaled_mm
itself, wrapped for the duration of a diagnostic (never in the timed steps) and restored after.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass
class ScaledMatmuls:
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (operand a, operand b, output) dtypes

    @property
    def float8(self) -> list[tuple[str, str, str]]:
        """The calls whose two operands are float8."""
        return [call for call in self.calls if call[0].startswith("float8") and call[1].startswith("float8")]


@contextmanager
def scaled_matmuls() -> Iterator[ScaledMatmuls]:
    """Count torch._scaled_mm calls inside the block."""
    seen, real = ScaledMatmuls(), torch._scaled_mm

    def counted(a: torch.Tensor, b: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        out = real(a, b, *args, **kwargs)
        seen.calls.append((_name(a.dtype), _name(b.dtype), _name(out.dtype)))
        return out

    torch._scaled_mm = counted
    try:
        yield seen
    finally:
        torch._scaled_mm = real


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
