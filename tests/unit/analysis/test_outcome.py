"""Exit codes from records: what the default expects, and what a matrix may declare instead."""

from __future__ import annotations

from conftest import tiny_matrix

from amp_suite.analysis.outcome import ExitCode, judge
from amp_suite.analysis.summary import summarize
from amp_suite.config import Matrix
from amp_suite.records.results import CellRecord

MATRIX = Matrix.model_validate(tiny_matrix(repeats=2, precisions=["fp32", "fp16", "bf16"]))


def _records(**overrides):
    """Two seeds per precision; overrides map precision -> (status, val_metric)."""
    records = []
    for spec in MATRIX.cells("cpu"):
        status, metric = overrides.get(spec.precision, ("ok", 0.90 + 0.01 * spec.seed))
        records.append(
            CellRecord.for_spec(spec, status, None if status == "ok" else "why", val_metric=metric,
                                val_higher_is_better=True, throughput=100.0)
        )  # fmt: skip
    return records


def _judge(records, expect=()):
    matrix = Matrix.model_validate(tiny_matrix(repeats=2, precisions=["fp32", "fp16", "bf16"], expect=list(expect)))
    return judge(records, summarize(records, matrix.parity), matrix.expect)


def test_all_ok_and_parity_kept_exits_0():
    outcome = _judge(_records())
    assert outcome.exit_code is ExitCode.OK and not outcome.problems


def test_a_failed_or_diverged_cell_exits_3_and_names_it():
    outcome = _judge(_records(bf16=("diverged", None)))
    assert outcome.exit_code is ExitCode.CELLS_FAILED
    assert any("mlp/bs8/seed0/bf16: diverged" in problem for problem in outcome.problems)


def test_skipped_cells_are_fine():
    assert _judge(_records(fp16=("skipped", None))).exit_code is ExitCode.OK


def test_a_parity_failure_exits_4():
    outcome = _judge(_records(fp16=("ok", 0.10)))
    assert outcome.exit_code is ExitCode.UNEXPECTED_VERDICT
    assert outcome.problems == ("mlp/bs8/fp16: parity fail (-0.805 against a margin of 0.0181)",)


def test_an_expected_parity_failure_exits_0_and_is_reported_as_expected():
    outcome = _judge(_records(fp16=("ok", 0.10)), [{"precision": "fp16", "parity": "fail"}])
    assert outcome.exit_code is ExitCode.OK
    assert outcome.as_expected == ("mlp/bs8/fp16: parity fail (expected fail)",)


def test_an_expected_failure_that_does_not_happen_exits_4():
    outcome = _judge(_records(), [{"precision": "fp16", "parity": "fail"}])
    assert outcome.exit_code is ExitCode.UNEXPECTED_VERDICT
    assert outcome.problems == ("mlp/bs8/fp16: parity pass (expected fail)",)


def test_an_expected_parity_failure_on_a_skipped_cell_is_not_met():
    outcome = _judge(_records(fp16=("skipped", None)), [{"precision": "fp16", "parity": "fail"}])
    assert outcome.exit_code is ExitCode.UNEXPECTED_VERDICT and "not judged" in outcome.problems[0]


def test_an_expected_divergence_exits_0_and_skips_the_parity_it_implies():
    expect = [{"workload": "mlp", "precision": "bf16", "status": "diverged"}]
    outcome = _judge(_records(bf16=("diverged", None)), expect)
    assert outcome.exit_code is ExitCode.OK and len(outcome.as_expected) == 2  # one per seed


def test_a_failure_outranks_an_unexpected_verdict():
    outcome = _judge(_records(fp16=("ok", 0.10), bf16=("failed", None)))
    assert outcome.exit_code is ExitCode.CELLS_FAILED and len(outcome.problems) == 3
