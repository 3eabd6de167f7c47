"""Estimates held against a baseline and against measurements (report.prediction), and the host's
cost per kernel an estimate of a run's records assumes."""

from __future__ import annotations

import pytest

from amp_suite.analysis.roofline import CellEstimate, StepEstimate
from amp_suite.report.prediction import estimated_speedups, host_figure, mean_absolute_error


def cell(precision: str, ms: float, label: str = "mlp", batch: int = 64) -> CellEstimate:
    step = StepEstimate("H100 SXM", precision, gpu_seconds=ms / 2e3, host_seconds=ms / 1e3, launch_us=5.0)
    return CellEstimate(label, {"hidden": 32}, batch, step)


def test_each_mode_is_its_own_cells_baseline_step_over_its_own():
    cells = [cell("fp32", 4.0), cell("bf16", 2.0), cell("bf16", 1.0, batch=128), cell("tf32", 5.0, label="other")]
    found = estimated_speedups(cells, "fp32", "given")
    assert found[0] is None  # the baseline itself
    assert found[1] is not None and found[1].estimated == pytest.approx(2.0) and found[1].bound == "host"
    assert (found[1].gpu_ms, found[1].host_ms, found[1].launch_us) == pytest.approx((1.0, 2.0, 5.0))
    assert found[1].launch_source == "given"
    assert found[2] is None and found[3] is None  # another batch, another workload: no fp32 of their own


def test_the_error_is_the_estimate_over_the_measurement_and_the_mean_is_of_its_size():
    slow, fast = estimated_speedups([cell("fp32", 4.0), cell("bf16", 2.0), cell("fp16", 8.0)], "fp32")[1:]
    rows = [slow.model_copy(update={"measured": 1.6}), fast.model_copy(update={"measured": 1.0}), slow]
    assert rows[0].error == pytest.approx(0.25) and rows[1].error == pytest.approx(-0.5) and rows[2].error is None
    assert mean_absolute_error(rows) == pytest.approx(0.375)  # |+25%| and |-50%|; the unmeasured row left out
    assert mean_absolute_error(rows[2:]) is None


def test_a_given_host_figure_wins_then_the_records_own_then_the_tables_assumption_and_each_says_so():
    given = host_figure(47.0, [3.0, 4.0, 9.0], assumed=5.0)
    assert (given.launch_us, given.source, given.set_aside) == (47.0, "given", 4.0)
    assert "given with --launch-us" in given.words() and "4 µs" in given.words()
    assert "no measurement" in host_figure(47.0, [], 5.0).words()
    measured = host_figure(None, [3.0, 4.0, 9.0], assumed=5.0)
    assert (measured.launch_us, measured.source) == (4.0, "measured")  # the median: one odd record can't move it
    assert "measured on the host that ran" in measured.words()
    assumed = host_figure(None, [], assumed=5.0)
    assert (assumed.launch_us, assumed.source) == (5.0, "assumed") and "--launch-us" in assumed.words()
