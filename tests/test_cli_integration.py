"""End to end: the real console script on CPU, results.jsonl and the nested MLflow runs."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
import yaml
from conftest import EXPERIMENTS, amp_suite, embedded, read_records, runs_in, tiny_matrix

pytestmark = pytest.mark.slow


def nested_runs(out: Path, experiment: str):
    return runs_in(embedded(out), experiment)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    matrix = root / "tiny.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix()))
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(root / "out"), "--device", "cpu", cwd=root)
    return root, matrix, done


def test_every_cell_is_recorded_and_mirrored_as_a_nested_run(tiny_run):
    root, _, done = tiny_run
    assert done.returncode == 0, done.stderr
    out = root / "out"
    records = read_records(out)
    assert [r["precision"] for r in records] == ["fp32", "tf32", "fp16", "bf16"]
    assert {r["status"] for r in records} <= {"ok", "skipped"}
    assert all(r["reason"] for r in records if r["status"] == "skipped")
    for key in (
        "workload",
        "device",
        "device_name",
        "batch_size",
        "steps",
        "throughput",
        "step_time_ms_p50",
        "step_time_ms_p90",
        "peak_memory_mb",
        "final_loss",
        "loss_scale",
        "skipped_steps",
        "mlflow_run_id",
        "config",
        "environment",
    ):
        assert key in records[0], key

    parents, children = nested_runs(out, "tiny")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    by_id = {c.info.run_id: c for c in children}
    assert set(by_id) == {r["mlflow_run_id"] for r in records}
    fp32 = by_id[records[0]["mlflow_run_id"]]
    assert fp32.data.metrics["throughput"] == pytest.approx(records[0]["throughput"])
    assert fp32.data.params["workload.hidden"] == "32" and fp32.data.tags["env.torch"]
    assert "fp32" in done.stdout and "vs fp32" in done.stdout  # the summary table


def test_loss_series_is_logged_per_step(tiny_run):
    from mlflow import MlflowClient

    root, _, _ = tiny_run
    record = read_records(root / "out")[0]
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'out' / 'mlflow.db'}")
    history = client.get_metric_history(record["mlflow_run_id"], "train_loss")
    assert [m.step for m in history] == [2, 3, 4, 5]
    assert [m.value for m in history] == pytest.approx(record["loss_curve"])


def test_resume_skips_cells_already_ok(tiny_run):
    root, matrix, _ = tiny_run
    out = root / "out"
    before = read_records(out)
    again = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", "--resume", cwd=root)
    assert again.returncode == 0, again.stderr
    added = read_records(out)[len(before) :]
    assert [r["precision"] for r in added] == [r["precision"] for r in before if r["status"] != "ok"]


def test_smoke_matrix_covers_everything_within_three_minutes(tmp_path):
    started = time.monotonic()
    done = amp_suite(
        "run", "--matrix", str(EXPERIMENTS / "smoke.yaml"), "--out", str(tmp_path), "--device", "cpu", cwd=tmp_path
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert elapsed < 180, f"smoke matrix took {elapsed:.0f}s"
    records = read_records(tmp_path)
    cells = {(r["workload"], r["precision"]): r for r in records}
    assert len(cells) == len(records) == 12
    assert all(r["status"] == "ok" or (r["status"] == "skipped" and r["reason"]) for r in records)
    forced = cells[("mlp", "fp16")]
    assert forced["status"] == "ok" and forced["loss_scale"] > 0  # the GradScaler path ran
    parents, children = nested_runs(tmp_path, "smoke")
    assert len(parents) == 1 and len(children) == 12

    # Validation: fp32 learns well above chance (10 classes) without saturating; perplexity is finite.
    for workload in ("resnet", "mlp"):
        accuracy = cells[(workload, "fp32")]["val_metric"]
        assert 0.3 < accuracy < 0.99, (workload, accuracy)
    perplexity = cells[("transformer", "fp32")]["val_metric"]
    assert math.isfinite(perplexity) and 4 < perplexity < 512  # between the chain's floor and uniform
    # Every AMP cell that ran has a parity verdict (one seed: indicative), shown and stored.
    amp = [r for r in records if r["precision"] != "fp32" and r["status"] == "ok"]
    assert amp and "indicative" in done.stdout
    tags = parents[0].data.tags
    assert all(tags[f"parity/{r['workload']}/bs{r['batch_size']}/{r['precision']}"] == "indicative" for r in amp)


def test_failure_modes_fp16_without_scaling_fails_parity_and_with_scaling_passes(tmp_path):
    started = time.monotonic()
    matrix = str(EXPERIMENTS / "failure-modes.yaml")
    done = amp_suite("run", "--matrix", matrix, "--out", str(tmp_path), "--device", "cpu", cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert elapsed < 300, f"failure-modes matrix took {elapsed:.0f}s"
    tags = nested_runs(tmp_path, "failure-modes")[0][0].data.tags
    assert tags["parity/mlp/bs64/fp16"] == "pass"
    assert tags["parity/mlp/bs64/fp16-noscale"] == "fail"
    records = read_records(tmp_path)
    assert all(r["grad_underflow_fraction"] > 0.9 for r in records)  # the reason, measured
