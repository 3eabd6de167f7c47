"""End to end: the real console script on CPU, results.jsonl and the nested MLflow runs."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import EXPERIMENTS, amp_suite, embedded, read_records, runs_in, tiny_matrix

from amp_suite.records.results import CellRecord
from amp_suite.records.schema import fields_of

pytestmark = pytest.mark.slow


def nested_runs(out: Path, experiment: str):
    return runs_in(embedded(out), experiment)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    matrix = root / "tiny.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix()))
    # MLflow samples system metrics every 10 s; a tiny matrix ends sooner than that.
    sampling = {"MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL": "1"}
    out = str(root / "out")
    done = amp_suite("run", "--matrix", str(matrix), "--out", out, "--device", "cpu", cwd=root, env=sampling)
    return root, matrix, done


def test_every_cell_is_recorded_and_mirrored_as_a_nested_run(tiny_run):
    root, _, done = tiny_run
    assert done.returncode == 0, done.stderr
    out = root / "out"
    records = read_records(out)
    assert [r["precision"] for r in records] == ["fp32", "tf32", "fp16", "bf16"]
    assert {r["status"] for r in records} <= {"ok", "skipped"}
    assert all(r["reason"] for r in records if r["status"] == "skipped")

    parents, children = nested_runs(out, "tiny")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    by_id = {c.info.run_id: c for c in children}
    assert set(by_id) == {r["tracker_run_id"] for r in records}
    fp32 = by_id[records[0]["tracker_run_id"]]
    # Every quantity the record declares measured, and that this cell measured, is a metric of its run.
    measured = {key: records[0][key] for key in fields_of(CellRecord, role="measured") if records[0][key] is not None}
    assert {"throughput", "step_time_ms_p50", "peak_memory_mb", "final_loss", "flops_per_step"} <= set(measured)
    assert {key: fp32.data.metrics.get(key) for key in measured} == pytest.approx(measured)
    assert fp32.data.params["workload.hidden"] == "32" and fp32.data.tags["env.torch"]
    assert "fp32" in done.stdout and "vs fp32" in done.stdout  # the summary table


def test_loss_series_is_logged_per_step(tiny_run):
    from mlflow import MlflowClient

    root, _, _ = tiny_run
    record = read_records(root / "out")[0]
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'out' / 'mlflow.db'}")
    history = client.get_metric_history(record["tracker_run_id"], "train_loss")
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


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    started = time.monotonic()
    done = amp_suite("run", "--matrix", str(EXPERIMENTS / "smoke.yaml"), "--out", str(out), "--device", "cpu", cwd=out)
    return out, done, time.monotonic() - started


@pytest.fixture(scope="module")
def failure_modes_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("failure-modes")
    started = time.monotonic()
    matrix = str(EXPERIMENTS / "failure-modes.yaml")
    done = amp_suite("run", "--matrix", matrix, "--out", str(out), "--device", "cpu", cwd=out)
    return out, done, time.monotonic() - started


def children_by_cell(out: Path, experiment: str) -> dict:
    return {run.data.tags["cell_id"]: run for run in nested_runs(out, experiment)[1]}


def test_smoke_matrix_covers_everything_within_three_minutes_report_included(smoke_run):
    out, done, elapsed = smoke_run
    assert done.returncode == 0, done.stderr
    assert elapsed < 180, f"smoke matrix took {elapsed:.0f}s"
    records = read_records(out)
    cells = {(r["workload"], r["precision"]): r for r in records if r["compile"] == "off"}
    assert len(cells) == 12 and len(records) == 12 + 4  # and the MLP compiled, in every precision
    compiled = [r for r in records if r["compile"] == "default"]
    assert {r["status"] for r in compiled} == {"ok", "skipped"} and all(r["warmup_s"] or r["reason"] for r in compiled)
    assert all(r["status"] == "ok" or (r["status"] == "skipped" and r["reason"]) for r in records)
    forced = cells[("mlp", "fp16")]
    assert forced["status"] == "ok" and forced["loss_scale"] > 0  # the GradScaler path ran
    parents, children = nested_runs(out, "smoke")
    assert len(parents) == 1 and len(children) == 16
    assert {p.name for p in (out / "report").iterdir()} >= {"report.html", "report.md", "report.json", "figures"}

    # Validation: fp32 learns well above chance (10 classes) without saturating; perplexity is finite.
    for workload in ("resnet", "mlp"):
        accuracy = cells[(workload, "fp32")]["val_metric"]
        assert 0.3 < accuracy < 0.99, (workload, accuracy)
    perplexity = cells[("transformer", "fp32")]["val_metric"]
    assert math.isfinite(perplexity) and 4 < perplexity < 512  # between the chain's floor and uniform
    # Every AMP cell that ran has a parity verdict (one seed: indicative), shown and stored on its run.
    amp = [r for r in records if r["precision"] != "fp32" and r["status"] == "ok"]
    assert amp and "indicative" in done.stdout
    runs = children_by_cell(out, "smoke")
    assert all(runs[r["cell_id"]].data.tags["parity"] == "indicative" for r in amp)


def test_failure_modes_fp16_without_scaling_fails_parity_and_with_scaling_passes(failure_modes_run):
    out, done, elapsed = failure_modes_run
    assert done.returncode == 0, done.stderr
    assert elapsed < 300, f"failure-modes matrix took {elapsed:.0f}s"
    records = read_records(out)
    runs = children_by_cell(out, "failure-modes")
    amp = [(r["precision"], runs[r["cell_id"]].data) for r in records if r["precision"] != "fp32"]
    assert {(mode, data.tags["parity"]) for mode, data in amp} == {("fp16", "pass"), ("fp16-noscale", "fail")}
    assert {(mode, data.metrics["parity_pass"]) for mode, data in amp} == {("fp16", 1.0), ("fp16-noscale", 0.0)}
    assert all(r["grad_underflow_fraction"] > 0.9 for r in records)  # the reason, measured


def test_a_record_stands_alone_and_mlflow_is_built_for_review(tiny_run):
    from mlflow import MlflowClient

    root, _, _ = tiny_run
    out = root / "out"
    record = read_records(out)[0]
    assert record["parity_rule"] == {"tolerance": 0.02, "k": 2.0} and record["invocation_id"]
    assert record["machine"]["device_type"] == "cpu" and record["machine"]["host"] and record["machine"]["torch"]
    assert record["environment"]["cuda_device_order"] == "PCI_BUS_ID"  # --gpus 2 is nvidia-smi's GPU 2
    assert record["flops_per_step"] > 0 and record["tflops"] > 0 and record["mfu"] is None  # no published CPU peak
    assert len(record["throughput_windows"]) == 4 and record["noisy"] in (True, False)  # 4 timed steps: 4 windows
    # CPU time of the timed steps: a CPU step is work, never less than a microsecond of it.
    assert record["host_cpu_ms_per_step"] > 1e-3
    log = Path(record["log_path"]).read_text()
    begin, end = (float(re.search(rf"timed steps: {edge} at monotonic ([0-9.]+)", log)[1]) for edge in ("begin", "end"))
    assert 0 < end - begin < record["duration_s"]  # the log bounds the timed steps, inside the cell's run

    client = MlflowClient(tracking_uri=embedded(out))
    experiment = client.get_experiment_by_name("tiny")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # not the GenAI view
    parents, children = nested_runs(out, "tiny")  # a later test may have resumed into the folder
    parent = next(p for p in parents if p.data.tags["amp_suite.invocation_id"] == record["invocation_id"])
    host = record["machine"]["host"]
    assert parent.info.run_name.startswith(f"{record['device_name']} @ {host} · tiny · ")
    assert parent.data.tags["host"] == host and parent.data.tags["env.torch"] == record["machine"]["torch"]
    assert not any(key.startswith("speedup/") for key in parent.data.metrics)  # no chart per metric name
    assert parent.data.metrics["system/cpu_utilization_percentage"] >= 0  # MLflow's system metrics, on the parent
    assert "system/cpu_utilization_percentage" not in bf16_child(children).data.metrics
    assert record["energy_j"] is None and record["throttled"] is None  # a CPU: no NVML readings, not zeros
    listed = {f.path for f in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.html", "report/report.md", "report/report.json"} <= listed
    bf16 = bf16_child(children)
    assert (bf16.data.params["workload"], bf16.data.params["batch_size"]) == ("mlp", "8")
    assert (bf16.data.params["compile"], bf16.data.params["channels_last"]) == ("off", "False")
    assert bf16.data.tags["parity"] == "indicative" and bf16.data.metrics["speedup"] > 0
    found = client.search_runs([experiment.experiment_id], "tags.parity = 'indicative'")
    assert {r.info.run_id for r in found} >= {bf16.info.run_id}


def bf16_child(children):
    return next(c for c in children if c.data.params["precision"] == "bf16" and c.data.tags["status"] == "ok")


def test_a_moved_run_folder_still_lists_its_artifacts_in_the_ui(tiny_run, tmp_path):
    import shutil
    import urllib.request

    from conftest import free_port, start_amp_suite, wait_for

    root, _, _ = tiny_run
    shutil.copytree(root / "out", tmp_path / "first-place")
    moved = shutil.move(tmp_path / "first-place", tmp_path / "gathered")  # the old path is gone
    child = read_records(Path(moved))[0]["tracker_run_id"]
    port = free_port()
    ui = start_amp_suite("ui", "--out", str(moved), "--port", str(port), cwd=tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/api/2.0/mlflow/artifacts/list?run_id={child}"

        def listing():
            try:
                return json.loads(urllib.request.urlopen(url, timeout=5).read())
            except OSError:
                assert ui.poll() is None, ui.stderr.read()
                return None

        files = wait_for(listing, 90, "the MLflow UI")
        assert "record.json" in {f["path"] for f in files.get("files", [])}, files
    finally:
        ui.terminate()
        ui.wait(timeout=30)


def _second_machine(records: list[dict]) -> list[dict]:
    """FIXTURE: the smoke records relabelled as if from an A100 box. Made-up, never a result."""
    relabelled = []
    for number, record in enumerate(records):
        machine = {"device_type": "cuda", "device_name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0",
                   "driver": "fixture", "cuda": "12.8", "torch": "2.14.1", "host": "fixture-second-machine",
                   "tensor_cores": True, "fast_fp16": True, "fast_bf16": True, "tf32": True}  # fmt: skip
        relabelled.append({**record, "record_id": f"fixture-{number}", "device": "cuda", "machine": machine})
        if record["workload"] == "mlp" and record["step_time_ms_p50"] is not None:
            # An A100's MLP step is launch-bound (a few ms), however long this CPU took under load.
            relabelled[-1]["step_time_ms_p50"] = min(record["step_time_ms_p50"], 2.0)
    return relabelled


def test_report_keeps_machines_apart_and_judges_the_articles_claims(smoke_run, failure_modes_run, tmp_path):
    smoke, fm = smoke_run[0], failure_modes_run[0]
    fixture = tmp_path / "fixture-a100-results.jsonl"
    fixture.write_text("".join(json.dumps(r) + "\n" for r in _second_machine(read_records(smoke))))
    started = time.monotonic()
    done = amp_suite("report", str(smoke), str(fm), str(fixture), "--out", str(tmp_path / "report"), cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())

    assert len(report["machines"]) == 2 and report["records"] == 16 + 9 + 16  # smoke (with compiled MLP), fm
    cpu, a100 = sorted(report["machines"], key=lambda m: m["device_type"] == "cuda")
    assert a100["hosts"] == ["fixture-second-machine"]
    keys = [(r["machine"], r["setup"], r["precision"]) for r in report["rows"]]
    assert len(keys) == len(set(keys)) and {r["machine"] for r in report["rows"]} == {cpu["id"], a100["id"]}
    for row in report["rows"]:
        assert {"workload", "batch_size", "precision", "machine", "throughput", "unit", "speedup",
                "speedup_interval", "memory_ratio", "parity"} <= row.keys()  # fmt: skip
    assert {r["unit"] for r in report["rows"]} == {"images/s", "tokens/s", "samples/s"}

    claims = {(c["claim"], c["machine"]): c for c in report["claims"]}
    assert claims[("tensor_core_speedup", cpu["id"])]["verdict"] == "not measured here"
    assert claims[("fp16_needs_scaler", cpu["id"])]["verdict"] == "supported"  # failure-modes, measured here
    assert "100% of gradients" in claims[("fp16_needs_scaler", cpu["id"])]["evidence"]
    assert claims[("launch_bound_little_gain", a100["id"])]["verdict"] in ("supported", "contradicted")
    assert claims[("amp_lowers_memory", a100["id"])]["verdict"] in ("supported", "contradicted")
    assert claims[("tensor_core_speedup", a100["id"])]["verdict"] == "not measured here"  # its tf32 cells: skipped
    assert {r["verdict"] for r in report["references"]} == {"no matching run"}
    assert all({"id", "gpu", "published", "measured", "ratio", "verdict"} <= r.keys() for r in report["references"])

    markdown = (tmp_path / "report" / "report.md").read_text()
    assert f"| {cpu['label']} | {a100['label']} |" in markdown  # the cross-machine table's columns
    html = (tmp_path / "report" / "report.html").read_text()
    figures = list((tmp_path / "report" / "figures").glob("*.png"))
    assert len(figures) >= 4 and html.count('<img src="data:image/png;base64,') == len(figures)
    linked = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", html, re.I)
    assert linked and all(target.startswith("data:image/png;base64,") for target in linked)  # nothing to fetch
    assert not re.search(r"url\(|@import|<script|<link|<iframe", html, re.I)
    assert elapsed < 60, f"report took {elapsed:.0f}s"


def test_a_report_reads_an_mlflow_experiment_as_it_reads_the_folder(tiny_run, tmp_path):
    root, _, _ = tiny_run
    out = root / "out"
    from_store = amp_suite("report", "tiny", "--tracking-uri", embedded(out), "--out", str(tmp_path / "store"),
                           "--format", "json", cwd=tmp_path)  # fmt: skip
    from_folder = amp_suite("report", str(out), "--out", str(tmp_path / "folder"), "--format", "json", cwd=tmp_path)
    assert from_store.returncode == 0 and from_folder.returncode == 0, from_store.stderr + from_folder.stderr
    store, folder = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("store", "folder"))
    assert store["records"] == folder["records"] == len(read_records(out))
    assert store["rows"] == folder["rows"] and store["claims"] == folder["claims"]
    assert not (tmp_path / "store" / "report.html").exists()  # only the formats asked for
