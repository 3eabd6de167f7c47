"""The global numeric state an entry could change: read whole, and a change named by its switch."""

from __future__ import annotations

import torch

from amp_suite.workloads.numerics import changed_switches, numeric_state


def test_a_flipped_tf32_switch_is_named_with_its_values():
    before = numeric_state()
    saved, saved_precision = torch.backends.cuda.matmul.allow_tf32, torch.backends.cuda.matmul.fp32_precision
    try:
        torch.backends.cuda.matmul.allow_tf32 = not saved  # torch sets the new API's switch with it
        changed = changed_switches(before, numeric_state())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
        torch.backends.cuda.matmul.fp32_precision = saved_precision
    assert f"torch.backends.cuda.matmul.allow_tf32 ({saved} -> {not saved})" in changed
    assert changed_switches(before, numeric_state()) == []  # restored: nothing to say


def test_the_default_dtype_is_part_of_the_state():
    before = numeric_state()
    try:
        torch.set_default_dtype(torch.float64)
        changed = changed_switches(before, numeric_state())
    finally:
        torch.set_default_dtype(torch.float32)
    assert changed == ["torch.get_default_dtype() (torch.float32 -> torch.float64)"]
