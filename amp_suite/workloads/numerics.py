"""The global numeric state a user's entry could change behind the suite's back: the switches that
make "float32" mean TF32 on a GPU or bf16 on a CPU (oneDNN), the default dtype, and the reduced-
precision reductions of fp16 and bf16 matmuls.

The cell sets these for its precision mode (cell.precision.fp32_math) and records what it set; an
entry that flips one in its `build()` would make the fp32 baseline silently run in TF32 while its
record still said `ieee`. So the state is read before and after the entry runs, and a change is
refused, naming the switch, rather than measured.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# Each switch by the name a user would write, and how to read it. A legacy getter raises where the
# legacy and new TF32 APIs were mixed: that reading ("unreadable: ...") is a state of its own.
SWITCHES: tuple[tuple[str, Callable[[], object]], ...] = (
    ("torch.backends.cuda.matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
    ("torch.backends.cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
    ("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision),
    ("torch.backends.fp32_precision", lambda: torch.backends.fp32_precision),
    ("torch.backends.cuda.matmul.fp32_precision", lambda: torch.backends.cuda.matmul.fp32_precision),
    ("torch.backends.cudnn.fp32_precision", lambda: torch.backends.cudnn.fp32_precision),
    ("torch.backends.cudnn.conv.fp32_precision", lambda: torch.backends.cudnn.conv.fp32_precision),
    ("torch.backends.cudnn.rnn.fp32_precision", lambda: torch.backends.cudnn.rnn.fp32_precision),
    ("torch.backends.mkldnn.fp32_precision", lambda: torch.backends.mkldnn.fp32_precision),
    ("torch.backends.mkldnn.matmul.fp32_precision", lambda: torch.backends.mkldnn.matmul.fp32_precision),
    ("torch.backends.mkldnn.conv.fp32_precision", lambda: torch.backends.mkldnn.conv.fp32_precision),
    ("torch.backends.mkldnn.rnn.fp32_precision", lambda: torch.backends.mkldnn.rnn.fp32_precision),
    ("torch.get_default_dtype()", torch.get_default_dtype),
    (
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    ),
    (
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    ),
)


def numeric_state() -> dict[str, str]:
    """Every switch's value, as text."""
    return {name: _read(get) for name, get in SWITCHES}


def _read(get: Callable[[], object]) -> str:
    try:
        return str(get())
    except (RuntimeError, AttributeError) as exc:  # mixed APIs; a switch this torch lacks
        return f"unreadable: {type(exc).__name__}"


def changed_switches(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Each switch whose value differs, as `name (before -> after)`."""
    return [f"{name} ({before[name]} -> {after[name]})" for name in before if after.get(name) != before[name]]
