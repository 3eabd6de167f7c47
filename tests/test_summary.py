from __future__ import annotations

import pytest
from conftest import tiny_matrix

from amp_suite.config import Matrix
from amp_suite.results import CellRecord
from amp_suite.summary import summarize

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
