from __future__ import annotations

import os
import signal

from conftest import tiny_matrix

from amp_suite.config import Matrix
from amp_suite.execution.worker import cell_context, run_isolated

SPEC = next(c for c in Matrix.model_validate(tiny_matrix()).cells("cpu") if c.precision == "fp32")


def killed_by_the_kernel(spec_json, connection, log_path, placement, down=None):
    print("about to die", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_cell_runs_in_its_own_process_and_reports_progress(tmp_path):
    seen = []
    record = run_isolated(cell_context([]), SPEC, tmp_path / "cell.log", lambda *p: seen.append(p))
    assert record.status == "ok" and record.throughput > 0
    assert ("warmup", 2, 2) in seen and ("measure", 4, 4) in seen
    assert record.log_path == str(tmp_path / "cell.log")


def test_a_worker_that_dies_is_recorded_failed(tmp_path):
    record = run_isolated(cell_context([]), SPEC, tmp_path / "cell.log", lambda *p: None, target=killed_by_the_kernel)
    assert record.status == "failed"
    assert "killed by SIGKILL" in record.reason and "out-of-memory" in record.reason
    assert record.cell_id == SPEC.cell_id
