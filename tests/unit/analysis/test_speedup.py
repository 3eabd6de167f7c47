"""A speedup's interval from the windows of the timed steps (analysis.speedup): side by side, drift
cancels window by window; one after another, it does not, and the interval can't tell.

FIXTURES: the records are made up to exercise the arithmetic, not measurements.
"""

from __future__ import annotations

import math

import pytest
from conftest import tiny_matrix

from amp_suite.analysis.speedup import contrasts, interval
from amp_suite.analysis.summary import summarize
from amp_suite.config import Matrix
from amp_suite.records.results import CellRecord

CELLS = {c.precision: c for c in Matrix.model_validate(tiny_matrix(precisions=["fp32", "bf16"])).cells("cpu")}
# A machine whose speed swings 3x under a neighbour's load, window by window.
MACHINE = (1.0, 0.4, 1.0, 0.3, 0.9, 1.0)


def cell(precision: str, speed: float, machine=MACHINE, pair: str | None = "pair") -> CellRecord:
    """FIXTURE: a cell that runs at `speed` on a machine whose state in each window is `machine`."""
    windows = [speed * state for state in machine]
    throughput = len(windows) / sum(1 / w for w in windows)  # the windows' samples over their time
    return CellRecord.for_spec(
        CELLS[precision], "ok", throughput=throughput, throughput_windows=windows, side_by_side_id=pair,
        turn_order=[CELLS["fp32"].cell_id, CELLS["bf16"].cell_id] if pair else [],
    )  # fmt: skip


def test_side_by_side_a_machine_that_swings_3x_cancels_and_the_interval_stays_tight():
    (found,) = contrasts([cell("bf16", 800.0)], [cell("fp32", 1000.0)])
    assert found.side_by_side and math.exp(found.log_ratio) == pytest.approx(0.8)
    assert found.error == pytest.approx(0.0, abs=1e-12)  # every pair of windows says 0.8
    low, high = interval(0.8, [found])
    assert low == high == pytest.approx(0.8)


def test_one_after_another_the_same_swings_make_the_interval_wide_and_it_stays_positive():
    (found,) = contrasts([cell("bf16", 800.0, pair=None)], [cell("fp32", 1000.0, pair=None)])
    assert not found.side_by_side and found.error > 0.3
    low, high = interval(0.8, [found])
    assert 0 < low < 0.8 < 1 < high  # "could be either": no clipped bound, and a single seed has one
    assert low * high == pytest.approx(0.8**2)  # symmetric on the log scale


def test_a_change_within_a_pair_widens_the_interval_instead_of_moving_it():
    """Side by side, a load that came on for one cell's window alone: one pair of six says 2x."""
    fp32 = cell("fp32", 1000.0, machine=(1.0, 1.0, 0.4, 1.0, 1.0, 1.0))  # the neighbour hit its third window
    bf16 = cell("bf16", 800.0, machine=(1.0,) * 6)
    low, high = interval(bf16.throughput / fp32.throughput, contrasts([bf16], [fp32]))
    assert low < 0.8 < high  # the true 0.8x is inside, and the pair that said 2x widened it


def test_cells_of_different_comparisons_are_not_paired_even_with_windows_alike():
    fp32, bf16 = cell("fp32", 1000.0, pair="one"), cell("bf16", 800.0, pair="another")
    assert not contrasts([bf16], [fp32])[0].side_by_side


def test_no_windows_and_one_seed_give_no_interval_to_pretend_with():
    bare = [r.updated(throughput_windows=[]) for r in (cell("fp32", 1000.0, pair=None), cell("bf16", 800.0, pair=None))]
    (found,) = contrasts([bare[1]], [bare[0]])
    assert found.error is None and interval(0.8, [found]) is None


def test_the_summary_says_when_every_seed_ran_side_by_side():
    rows = {r.precision: r for r in summarize([cell("fp32", 1000.0), cell("bf16", 800.0)])}
    assert rows["bf16"].speedup.side_by_side and rows["bf16"].speedup.interval == pytest.approx((0.8, 0.8))
    assert rows["bf16"].noisy is False and rows["bf16"].throughput_range == pytest.approx((240.0, 800.0))
    apart = {r.precision: r for r in summarize([cell("fp32", 1000.0, pair=None), cell("bf16", 800.0, pair=None)])}
    assert not apart["bf16"].speedup.side_by_side


def test_runs_repeated_on_one_machine_are_a_pair_each_and_their_disagreement_widens_the_interval():
    """`amp-suite summary` over two run folders of one machine: the same seed twice, side by side
    each time, on a day when bf16 ran at 0.8x and on one when it ran at 1.6x."""
    runs = [(cell("fp32", 1000.0, pair="monday"), cell("bf16", 800.0, pair="monday")),
            (cell("fp32", 1000.0, pair="tuesday"), cell("bf16", 1600.0, pair="tuesday"))]  # fmt: skip
    found = contrasts([bf16 for _, bf16 in runs], [fp32 for fp32, _ in runs])
    assert len(found) == 2 and all(c.side_by_side for c in found)
    low, high = interval(1.2, found)
    assert low < 0.8 and high > 1.6  # two runs that disagree by 2x: an interval wide enough to say so


@pytest.mark.parametrize("window", [math.inf, math.nan, 0.0, -1.0])
def test_a_sequential_pair_leaves_out_a_window_no_cell_measures(window):
    """The stopping rule's ratio takes every round's pair (its own trimming sets outliers aside): a
    pair with a window that is not a positive, finite rate (a hand-edited record) is left out, not
    handed to the rule (an infinite window raised there)."""
    from amp_suite.analysis.speedup import sequential_ratio
    from amp_suite.records.results import TimingStop

    matrix = tiny_matrix(precisions=["fp32", "bf16"], steps=12, stopping={"rule": "sequential", "budget": 2})
    cells = {c.precision: c for c in Matrix.model_validate(matrix).cells("cpu")}
    stop = TimingStop(rule="sequential", stopped="budget", rounds=8, seconds=1.0)
    speeds = {"fp32": [100.0 + i for i in range(8)], "bf16": [150.0 + i for i in range(8)]}
    speeds["bf16"][3] = window
    fp32, bf16 = (
        CellRecord.for_spec(cells[mode], "ok", throughput=120.0, throughput_windows=speeds[mode], side_by_side_id="p",
                            timing_stop=stop)
        for mode in ("fp32", "bf16")
    )  # fmt: skip
    found = sequential_ratio([bf16], [fp32])
    assert found is not None and math.isfinite(found[0]) and all(map(math.isfinite, found[1])), found
