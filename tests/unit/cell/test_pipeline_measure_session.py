"""measure_session (amp_suite.cell.pipeline) called directly on a CPU MLP: what it measures and
hands to the record, without the cell's process, probe or record around it."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_matrix

from amp_suite.cell.pipeline import Measured, measure_session, prepare
from amp_suite.cell.precision import PrecisionPolicy
from amp_suite.config import Matrix
from amp_suite.config.base import window_edges
from amp_suite.records.finish import FieldCollision
from amp_suite.records.results import CellRecord

CPU = torch.device("cpu")
SPEC = next(c for c in Matrix.model_validate(tiny_matrix(steps=6)).cells("cpu") if c.precision == "fp32")


@pytest.fixture(scope="module")
def measured() -> tuple[Measured, list[tuple[str, int, int]]]:
    """One fp32 session measured (2 warmup and 6 timed steps), and the progress it reported."""
    seen: list[tuple[str, int, int]] = []
    session = prepare(SPEC, CPU)
    return measure_session(session, session.batches, SPEC, CPU, lambda *p: seen.append(p)), seen


def test_it_times_every_step_it_was_asked_for_and_reports_its_progress(measured):
    timed, seen = measured
    assert len(timed.measured[0]) == len(timed.measured[1]) == SPEC.steps  # a loss and a gradient norm per step
    assert len(timed.warmup[0]) == SPEC.warmup_steps
    assert timed.fields["untimed_steps"] == 0  # alone: no turn's first step is left untimed
    assert ("warmup", 2, 2) in seen and ("measure", 6, 6) in seen and seen[-1] == ("evaluate", 0, 1)


def test_its_throughput_is_positive_and_lies_between_its_windows(measured):
    fields = measured[0].fields
    windows = fields["throughput_windows"]
    assert len(windows) == len(window_edges(SPEC.steps)) - 1 == 3 and min(windows) > 0
    # Throughput is all samples over all the windows' seconds: never outside the windows' own rates.
    assert min(windows) * (1 - 1e-9) <= fields["throughput"] <= max(windows) * (1 + 1e-9)
    assert fields["throughput_spread"] == pytest.approx((max(windows) - min(windows)) / sorted(windows)[1])
    assert fields["host_cpu_ms_per_step"] > 0 and fields["warmup_s"] > 0


def test_its_step_times_are_the_stats_it_returns_and_its_curve_the_steps_losses(measured):
    timed = measured[0]
    assert timed.fields["step_time_ms_p50"] == timed.stats.p50_ms > 0
    assert timed.fields["step_time_ms_p90"] == timed.stats.p90_ms >= timed.stats.p50_ms
    assert timed.fields["loss_curve"] == timed.measured[0].tolist()
    assert timed.fields["final_loss"] == timed.fields["loss_curve"][-1]
    assert timed.fields["val_metrics"]["val_accuracy"] == timed.fields["val_metric"]


def test_it_proves_fp32_math_and_runs_the_diagnostics_on_a_quarter_of_the_batch(measured):
    fields = measured[0].fields
    assert fields["matmul_dtype"] == "float32"
    assert fields["diagnostics_batch_size"] == SPEC.batch_size // 4 and fields["flops_per_step"] > 0
    assert fields["host_syncs_per_step"] == 0  # fp32 has no scaler to read back


def test_every_field_it_hands_over_is_a_field_of_the_record(measured):
    fields = measured[0].fields
    assert fields.keys() <= CellRecord.model_fields.keys()
    record = CellRecord.for_spec(SPEC, "ok", **fields)  # and the record takes them as they are
    assert record.throughput == fields["throughput"]


def test_two_parts_giving_the_same_field_stop_it_loudly(monkeypatch):
    """A part that gives a field another part gives (here the policy's telemetry, the throughput) is
    an error naming both, not a record holding whichever came last."""
    monkeypatch.setattr(PrecisionPolicy, "telemetry", lambda self: {"throughput": 1.0})
    short = SPEC.model_copy(update={"steps": 2})
    session = prepare(short, CPU)
    with pytest.raises(FieldCollision, match="throughput is given twice: by timed steps and by precision policy"):
        measure_session(session, session.batches, short, CPU, diagnose=False)
