"""sync, in-process against a real sqlite MLflow store: what a resumed run's parent summarises."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import tiny_matrix

from amp_suite.config import Matrix
from amp_suite.records.invocations import InvocationStarted
from amp_suite.records.results import CellRecord
from amp_suite.records.rundir import RunDirectory
from amp_suite.tracking.mlflow_store import MlflowStore
from amp_suite.tracking.sync import SyncReport, sync_run_dir

MATRIX = Matrix.model_validate(tiny_matrix(precisions=["fp32", "bf16"]))


def _invocation(reused: list[str]) -> InvocationStarted:
    return InvocationStarted.now("resumed", "name: tiny\n", MATRIX.model_dump(mode="json"), 1, reused)


def test_a_resumed_runs_parent_summarises_the_records_it_reused(tmp_path):
    directory = RunDirectory(tmp_path / "out")
    directory.path.mkdir()
    fp32_spec, bf16_spec = MATRIX.cells("cpu")
    first = _invocation([])
    fp32 = CellRecord.for_spec(fp32_spec, "ok", throughput=100.0, val_metric=0.9, val_higher_is_better=True,
                               record_id="a" * 16, invocation_id=first.invocation_id)  # fmt: skip
    second = _invocation([fp32.identity])  # --resume: fp32 was done, only bf16 ran
    bf16 = CellRecord.for_spec(bf16_spec, "ok", throughput=150.0, val_metric=0.9, val_higher_is_better=True,
                               record_id="b" * 16, invocation_id=second.invocation_id)  # fmt: skip
    for invocation, record in ((first, fp32), (second, bf16)):
        directory.invocations.start(invocation)
        directory.results.append(record)
        directory.invocations.end(invocation.invocation_id, "finished")

    store = MlflowStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    report = SyncReport()
    sync_run_dir(directory, store, report)
    assert (report.added, report.parents) == (2, 2)
    experiment = store.client.get_experiment_by_name("resumed").experiment_id
    runs = store.runs_of(experiment, second.invocation_id)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    child = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert child.data.metrics["speedup"] == 1.5  # against the reused fp32 record
    assert child.data.tags["parity"] == "indicative" and child.data.params["precision"] == "bf16"
    summary = store.client.download_artifacts(parent.info.run_id, "summary.json", str(tmp_path))
    assert [row["speedups"]["fp32"]["value"] for row in json.loads(Path(summary).read_text())] == [1.0, 1.5]

    again = SyncReport()
    sync_run_dir(directory, store, again)
    assert (again.added, again.completed, again.parents, again.present) == (0, 0, 0, 2)
