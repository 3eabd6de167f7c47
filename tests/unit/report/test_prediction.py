"""Estimates held against a baseline and against measurements (report.prediction)."""

from __future__ import annotations

import pytest

from amp_suite.analysis.roofline import CellEstimate, StepEstimate
from amp_suite.report.prediction import estimated_speedups, mean_absolute_error


def cell(precision: str, ms: float, label: str = "mlp", batch: int = 64) -> CellEstimate:
    step = StepEstimate("H100 SXM", precision, ms / 1e3, {"launch": ms / 1e3})
    return CellEstimate(label, {"hidden": 32}, batch, step)


def test_each_mode_is_its_own_cells_baseline_step_over_its_own():
    cells = [cell("fp32", 4.0), cell("bf16", 2.0), cell("bf16", 1.0, batch=128), cell("tf32", 5.0, label="other")]
    found = estimated_speedups(cells, "fp32")
    assert found[0] is None  # the baseline itself
    assert found[1] is not None and found[1].estimated == pytest.approx(2.0) and found[1].bound == "launch"
    assert found[2] is None and found[3] is None  # another batch, another workload: no fp32 of their own


def test_the_error_is_the_estimate_over_the_measurement_and_the_mean_is_of_its_size():
    slow, fast = estimated_speedups([cell("fp32", 4.0), cell("bf16", 2.0), cell("fp16", 8.0)], "fp32")[1:]
    rows = [slow.model_copy(update={"measured": 1.6}), fast.model_copy(update={"measured": 1.0}), slow]
    assert rows[0].error == pytest.approx(0.25) and rows[1].error == pytest.approx(-0.5) and rows[2].error is None
    assert mean_absolute_error(rows) == pytest.approx(0.375)  # |+25%| and |-50%|; the unmeasured row left out
    assert mean_absolute_error(rows[2:]) is None
