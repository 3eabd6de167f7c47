from __future__ import annotations

import pytest
from conftest import tiny_matrix

from amp_suite.analysis.summary import parity, summarize
from amp_suite.config import Matrix, ParityConfig
from amp_suite.records.results import CellRecord

CELLS = Matrix.model_validate(tiny_matrix(repeats=2)).cells("cpu")


def _record(precision, seed, status="ok", throughput=None, memory=None, reason=None):
    spec = next(c for c in CELLS if c.precision == precision and c.seed == seed)
    return CellRecord.for_spec(spec, status, reason, throughput=throughput, peak_memory_mb=memory)


def test_speedup_and_memory_ratio_against_fp32_mean_over_seeds():
    records = [
        _record("fp32", 0, throughput=100.0, memory=1000.0),
        _record("fp32", 1, throughput=300.0, memory=1000.0),
        _record("bf16", 0, throughput=350.0, memory=600.0),
        _record("bf16", 1, throughput=450.0, memory=600.0),
    ]
    rows = {row.precision: row for row in summarize(records)}
    assert rows["fp32"].speedup == 1.0 and rows["fp32"].runs == 2
    assert rows["bf16"].speedup == pytest.approx(2.0)
    assert rows["bf16"].memory_ratio == pytest.approx(0.6)


def test_failed_and_skipped_cells_have_no_ratios_and_keep_their_reason():
    records = [
        _record("fp32", 0, throughput=100.0, memory=10.0),
        _record("tf32", 0, status="skipped", reason="needs 8.0"),
        _record("fp16", 0, throughput=50.0, memory=10.0),
        _record("fp16", 1, status="failed", reason="OOM"),
    ]
    rows = {row.precision: row for row in summarize(records)}
    assert (rows["tf32"].status, rows["tf32"].reason, rows["tf32"].speedup) == ("skipped", "needs 8.0", None)
    assert (rows["fp16"].status, rows["fp16"].runs, rows["fp16"].speedup) == ("failed", 1, 0.5)


def test_no_baseline_means_no_ratio():
    rows = summarize([_record("bf16", 0, throughput=10.0, memory=1.0)])
    assert rows[0].speedup is None and rows[0].memory_ratio is None


RULE = ParityConfig(tolerance=0.02, k=2.0)


def test_parity_with_one_seed_is_only_indicative():
    result = parity([0.89], [0.90], higher_is_better=True, rule=RULE)
    assert result.verdict == "indicative"
    assert result.delta == pytest.approx(-0.01) and result.tolerance == pytest.approx(0.018)


def test_parity_passes_within_the_noise_floor_and_fails_beyond_it():
    fp32 = [0.90, 0.92, 0.88]  # stdev 0.02 -> allowed degradation max(0.018, 2 x 0.02) = 0.04
    assert parity([0.87, 0.88, 0.86], fp32, True, RULE).verdict == "pass"  # 0.03 worse: run-to-run noise
    failed = parity([0.80, 0.81, 0.79], fp32, True, RULE)  # 0.10 worse: a real degradation
    assert failed.verdict == "fail" and failed.tolerance == pytest.approx(0.04)


def test_parity_counts_only_degradation_and_respects_direction():
    assert parity([0.99, 0.99], [0.90, 0.90], True, RULE).verdict == "pass"  # better accuracy
    perplexity = parity([12.0, 12.1], [10.0, 10.1], higher_is_better=False, rule=RULE)
    assert perplexity.verdict == "fail" and perplexity.delta == pytest.approx(2.0)
    assert parity([9.0, 9.1], [10.0, 10.1], higher_is_better=False, rule=RULE).verdict == "pass"


def test_parity_fails_a_nan_metric():
    assert parity([float("nan"), 0.9], [0.9, 0.91], True, RULE).verdict == "fail"
    assert parity([float("nan")], [0.9], True, RULE).verdict == "fail"  # not merely indicative


def test_a_diverged_amp_run_fails_parity_whatever_metric_it_reached():
    records = [
        _record("fp32", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": 0.90}),
        _record("bf16", 0, status="diverged", reason="nan").model_copy(update={"val_metric": 0.90}),
    ]
    row = next(r for r in summarize(records, RULE) if r.precision == "bf16")
    assert row.status == "diverged" and row.parity.verdict == "fail"


def test_summary_pairs_parity_by_seed():
    records = [
        _record("fp32", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": 0.90}),
        _record("fp32", 1, throughput=1.0, memory=1.0).model_copy(update={"val_metric": 0.92}),
        _record("bf16", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": 0.91}),
        _record("bf16", 1, status="failed", reason="boom"),
    ]
    row = next(r for r in summarize(records, RULE) if r.precision == "bf16")
    # seed 1 failed for bf16, so fp32's seed 1 is left out too: one pair -> indicative
    assert row.parity.verdict == "indicative" and row.parity.delta == pytest.approx(0.01)


def test_a_noisy_seed_or_a_wide_interval_makes_the_row_noisy():
    steady = [_record("fp32", 0, throughput=100.0), _record("fp32", 1, throughput=100.0),
              _record("bf16", 0, throughput=150.0), _record("bf16", 1, throughput=151.0)]  # fmt: skip
    assert not any(row.noisy for row in summarize(steady))
    wide = steady[:2] + [_record("bf16", 0, throughput=100.0), _record("bf16", 1, throughput=200.0)]
    rows = {row.precision: row for row in summarize(wide)}
    assert rows["bf16"].noisy and not rows["fp32"].noisy  # 1.5x, 95% interval from -4.9x to 7.9x
    flagged = steady[:3] + [steady[3].model_copy(update={"noisy": True})]
    assert {row.precision: row.noisy for row in summarize(flagged)} == {"fp32": False, "bf16": True}
