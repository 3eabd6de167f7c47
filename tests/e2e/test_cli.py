"""End to end: the real console script on CPU, results.jsonl and the nested MLflow runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, embedded, nested_runs, predict_rows, read_records, tiny_matrix

from amp_suite.records.machine import Machine
from amp_suite.records.results import CellRecord
from amp_suite.records.schema import fields_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    matrix = root / "tiny.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix()))
    # MLflow samples system metrics every 10 s; a tiny matrix ends sooner than that.
    # ... and the terminal is 120 columns wide, as a laptop's often is.
    sampling = {"MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL": "1", "COLUMNS": "120"}
    out = str(root / "out")
    done = amp_suite("run", "--matrix", str(matrix), "--out", out, "--device", "cpu", cwd=root, env=sampling)
    return root, matrix, done


def test_every_cell_is_recorded_and_mirrored_as_a_nested_run(tiny_run):
    from mlflow import MlflowClient

    root, _, done = tiny_run
    assert done.returncode == 0, done.stderr
    out = root / "out"
    records = sorted(read_records(out), key=lambda r: ["fp32", "tf32", "fp16", "bf16"].index(r["precision"]))
    assert [r["precision"] for r in records] == ["fp32", "tf32", "fp16", "bf16"]  # in the order they ended
    assert {r["status"] for r in records} <= {"ok", "skipped"}
    assert all(r["reason"] for r in records if r["status"] == "skipped")

    parents, children = nested_runs(out, "tiny")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    by_id = {c.info.run_id: c for c in children}
    assert set(by_id) == {r["tracker_run_id"] for r in records if r["status"] != "skipped"}
    fp32 = by_id[records[0]["tracker_run_id"]]
    # Every quantity the record declares measured, and that this cell measured, is on its run: the few
    # people compare as metrics (throughput in the workload's unit, named with it: the MLP's samples/s),
    # the rest in its diagnostics.json.
    measured = {key: records[0][key] for key in fields_of(CellRecord, role="measured") if records[0][key] is not None}
    assert {"throughput", "step_time_ms_p50", "peak_memory_mb", "final_loss", "flops_per_step"} <= set(measured)
    measured["throughput_samples_per_s"] = measured.pop("throughput")
    measured[records[0]["val_metric_name"]] = measured.pop("val_metric")
    client = MlflowClient(tracking_uri=embedded(out))
    diagnostics = client.download_artifacts(fp32.info.run_id, "diagnostics.json", str(root))
    diagnostics = json.loads(Path(diagnostics).read_text())
    assert {key: fp32.data.metrics.get(key, diagnostics.get(key)) for key in measured} == pytest.approx(measured)
    charted = {"throughput_samples_per_s", "peak_memory_mb", "val_accuracy", "train_loss", "speedup"}
    assert set(fp32.data.metrics) == charted  # the few people compare
    assert fp32.data.params["workload.hidden"] == "32" and fp32.data.tags["env.torch"]
    assert "fp32" in done.stdout and "vs fp32" in done.stdout  # the summary table


def test_at_120_columns_no_figure_is_cut_and_summary_reprints_the_tables(tiny_run):
    root, _, done = tiny_run
    out = root / "out"
    assert "…" not in done.stdout and max(len(line) for line in done.stdout.splitlines()) <= 120, done.stdout
    assert "vs fp32" in done.stdout and "The answer on" in done.stdout
    before = sorted((path, path.stat().st_mtime_ns) for path in out.rglob("*"))
    wide = amp_suite("summary", str(out), cwd=root, env={"COLUMNS": "200"})
    narrow = amp_suite("summary", str(out), cwd=root, env={"COLUMNS": "100"})
    assert wide.returncode == narrow.returncode == 0, wide.stderr + narrow.stderr
    assert sorted((path, path.stat().st_mtime_ns) for path in out.rglob("*")) == before  # it writes nothing
    assert "…" not in narrow.stdout and max(len(line) for line in narrow.stdout.splitlines()) <= 100
    assert "left out at 100 columns: " in " ".join(narrow.stdout.split())  # and says what it left out
    for record in read_records(out):  # every throughput in full where the table is wide enough for it
        if record["throughput"] is not None:
            assert f"{record['throughput']:,.1f} samples/s" in wide.stdout
    assert "The answer on" in narrow.stdout


def test_a_record_whose_batches_differ_from_fp32s_makes_its_comparison_invalid_in_report_and_summary(tiny_run):
    """A hand-edited (or foreign) bf16 line that drew other batches than fp32's run of its seed: the
    comparison is marked invalid everywhere a user reads it, never pooled into a verdict."""
    root, _, _ = tiny_run
    edited = root / "edited"
    edited.mkdir()
    lines = []
    for record in read_records(root / "out"):
        if record["precision"] == "bf16":
            assert record["batch_order_hash"] and record["data_fingerprint"]  # every record carries both
            record["batch_order_hash"] = "0" * 16
        lines.append(json.dumps(record))
    (edited / "results.jsonl").write_text("\n".join(lines) + "\n")
    done = amp_suite("report", str(edited), "--out", str(edited / "report"), cwd=root)
    assert done.returncode == 0, done.stderr
    report = json.loads((edited / "report" / "report.json").read_text())
    bf16 = next(row for row in report["rows"] if row["precision"] == "bf16")
    assert bf16["parity"]["verdict"] == "invalid" and bf16["parity"]["invalid"]["kind"] == "batch order"
    differed = bf16["parity"]["invalid"]["words"]
    assert differed.startswith("seed 0, batch 8: batch order 000000000000 differs from fp32's")
    (answer,) = report["answer"]
    assert answer["mode"] != "bf16" and "bf16 not compared with fp32, which saw other data (seed 0" in (
        answer["sentence"]
    )
    assert "invalid: seed 0, batch 8: batch order" in (edited / "report" / "report.md").read_text()
    summary = amp_suite("summary", str(edited), cwd=root, env={"COLUMNS": "200"})
    assert summary.returncode == 0 and "invalid: other batches" in summary.stdout


def test_loss_series_is_logged_per_step(tiny_run):
    from mlflow import MlflowClient

    root, _, _ = tiny_run
    record = next(r for r in read_records(root / "out") if r["precision"] == "fp32")
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
    assert sorted(r["precision"] for r in added) == sorted(r["precision"] for r in before if r["status"] != "ok")


def test_a_record_stands_alone_and_mlflow_is_built_for_review(tiny_run):
    from mlflow import MlflowClient

    root, _, _ = tiny_run
    out = root / "out"
    record = next(r for r in read_records(out) if r["precision"] == "fp32")
    assert record["parity_rule"] == {"method": "t-test", "tolerance": 0.02, "alpha": 0.05, "k": 2.0}
    assert record["invocation_id"]
    assert record["machine"]["device_type"] == "cpu" and record["machine"]["host"] and record["machine"]["torch"]
    assert record["environment"]["cuda_device_order"] == "PCI_BUS_ID"  # --gpus 2 is nvidia-smi's GPU 2
    assert record["flops_per_step"] > 0 and record["tflops"] > 0 and record["mfu"] is None  # no published CPU peak
    # 4 steps: 2 windows of 2, each a turn side by side with bf16 (tf32 and fp16 are skipped on a CPU),
    # whose first step is not timed.
    assert len(record["throughput_windows"]) == 2 and record["noisy"] in (True, False)
    assert record["untimed_steps"] == 2 and record["side_by_side_id"] and record["ran_alone"] is None
    assert record["turn_order"] == ["mlp/bs8/seed0/fp32", "mlp/bs8/seed0/bf16"]
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
    assert parent.info.run_name.startswith(f"{Machine(**record['machine']).model_name} · tiny · ")  # device, matrix
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
    rows = json.loads((out / "report" / "report.json").read_text())["rows"]
    verdict = next(r["parity"]["verdict"] for r in rows if r["precision"] == "bf16")  # one seed: no pass or fail
    assert bf16.data.tags["parity"] == verdict and verdict in ("indicative", "not judged")
    assert bf16.data.metrics["speedup"] > 0
    found = client.search_runs([experiment.experiment_id], f"tags.parity = '{verdict}'")
    assert {r.info.run_id for r in found} >= {bf16.info.run_id}


def test_mlflow_shows_what_differs_first_and_only_what_ran(tiny_run):
    """The runs table as a reviewer meets it: names that differ early, skipped cells off the table
    and listed on the parent, units in metric names, the cell's own params, its dataset, the
    commit, and a parent that answers and compares."""
    from mlflow.entities import ViewType

    from mlflow import MlflowClient

    root, _, _ = tiny_run
    out = root / "out"
    invocation = read_records(out)[0]["invocation_id"]  # the first run's (a later test may resume into the folder)
    records = [r for r in read_records(out) if r["invocation_id"] == invocation]
    fp32 = next(r for r in records if r["precision"] == "fp32")
    client = MlflowClient(tracking_uri=embedded(out))
    experiment = client.get_experiment_by_name("tiny").experiment_id
    runs = client.search_runs([experiment], f"tags.`amp_suite.invocation_id` = '{invocation}'", ViewType.ALL)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    skipped = {r["tracker_run_id"] for r in records if r["status"] == "skipped"}
    assert skipped and len(children) == len(records)
    for child in children:
        if child.info.run_id in skipped:  # no FINISHED run holds a skipped cell: it is set aside
            assert child.info.status != "FINISHED" and child.info.lifecycle_stage == "deleted"
    shown = [c for c in children if c.info.lifecycle_stage == "active"]
    assert all(c.info.status == "FINISHED" for c in shown)
    assert len({c.info.run_name[:16] for c in children}) == len(children)  # precisions differ within 16 characters
    assert all(c.info.run_name.startswith(c.data.params["precision"] + " · mlp · bs8") for c in children)
    for child in shown:
        assert any(re.fullmatch(r"throughput_(samples|images|tokens)_per_s", key) for key in child.data.metrics)
        assert "throughput" not in child.data.metrics
        params = child.data.params
        assert not [k for k, v in params.items() if v == "None" or v.startswith("[")], params  # no filler, no sweeps
        assert "workload.workload" not in params and params["workload"] == "mlp"
        (dataset,) = [d.dataset for d in child.inputs.dataset_inputs]
        assert dataset.digest == fp32["data_fingerprint"] and "digits" in dataset.name
        assert child.data.tags["mlflow.source.git.commit"] == records[0]["environment"]["git_commit"]
    assert parent.data.tags["mlflow.source.git.commit"] == records[0]["environment"]["git_commit"]
    assert all(run.data.tags["mlflow.source.name"] == "amp-suite" and run.data.tags["mlflow.user"] for run in runs)
    (answer,) = json.loads((root / "out" / "report" / "report.json").read_text())["answer"]  # the answer's judgement
    # The description opens on the answer itself: the UI folds it after its first line.
    assert parent.data.tags["mlflow.note.content"].startswith(f"**mlp** (batch 8, eager): {answer['sentence']}")
    assert all(r["cell_id"] in parent.data.tags["skipped_cells"] for r in records if r["status"] == "skipped")
    statuses = {status: sum(r["status"] == status for r in records) for status in ("ok", "skipped")}
    assert {k: int(parent.data.tags[f"cells_{k}"]) for k in statuses} == statuses
    assert parent.data.tags["parity_failures"] == "0"
    assert parent.data.tags["inconclusive_answers"] == str(int(answer["verdict"] == "inconclusive"))
    assert not [key for key in parent.data.metrics if not key.startswith("system/")]  # the children's are charted
    for child in shown:  # the few metrics people compare; the rest in one file
        assert set(child.data.metrics) <= charted_names(child, records), child.data.metrics
        assert child.data.tags["mlflow.note.content"].startswith(child.data.params["precision"] + " · ")
        assert "" not in child.data.tags.values()
        # A reason is tagged where the record has one, as it says it: a forced cell's ("forced
        # despite: this CPU has no native bf16 ...") on a CPU without avx512_bf16, none elsewhere.
        record = next(r for r in records if r["tracker_run_id"] == child.info.run_id)
        assert child.data.tags.get("reason") == record["reason"], (child.data.tags.get("reason"), record["reason"])
        assert "diagnostics.json" in {f.path for f in client.list_artifacts(child.info.run_id)}


def charted_names(run, records):
    from amp_suite.tracking.cell_view import charted_names as named

    record = next(r for r in records if r["tracker_run_id"] == run.info.run_id)
    return named(CellRecord.model_validate(record))


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


def test_a_report_from_a_store_that_sync_filled_keeps_the_skipped_cells_and_their_reasons(tiny_run, tmp_path):
    """A team store filled by `sync` holds every record the folder does: a skipped cell's run is set
    aside there as the run's own store sets it aside, so a report from either says why it was skipped."""
    root, _, _ = tiny_run
    out, team = root / "out", f"sqlite:///{tmp_path / 'team.db'}"
    synced = amp_suite("sync", str(out), "--tracking-uri", team, cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    skipped = [r for r in read_records(out) if r["status"] == "skipped"]
    reports = {}
    for name, source in (("folder", [str(out)]), ("store", ["tiny", "--tracking-uri", team])):
        done = amp_suite("report", *source, "--out", str(tmp_path / name), "--format", "json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        reports[name] = json.loads((tmp_path / name / "report.json").read_text())
    assert reports["store"]["records"] == reports["folder"]["records"] == len(read_records(out))
    reasons = {(row["precision"], row["reason"]) for row in reports["store"]["rows"] if row["status"] == "skipped"}
    assert reasons == {(r["precision"], r["reason"]) for r in skipped}
    assert skipped and f"{len(skipped)} skipped (set aside" in " ".join(synced.stdout.split())  # as rich wraps it


def test_predict_estimates_a_tiny_mlp_launch_bound_on_an_h100_and_names_what_dominates(tmp_path):
    """The smoke matrix's MLP (hidden 32, batch 64): on an H100 the host's kernel launches set its
    step, so bf16 gains nothing there (its casts add launches); a GPU the table has no bandwidth for
    is refused."""
    matrix = tmp_path / "tiny.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix(precisions=["fp32", "tf32", "bf16"])))
    done = amp_suite("predict", "--matrix", str(matrix), "--gpu", "H100 SXM", cwd=tmp_path, env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    rows = {cells[2]: cells for cells in predict_rows(done.stdout) if cells[0] == "mlp"}
    assert set(rows) == {"fp32", "tf32", "bf16"}
    vs_fp32 = float(rows["bf16"][4].removesuffix("x"))
    assert 0.4 < vs_fp32 < 1.05 and rows["bf16"][6] == rows["fp32"][6] == "host", rows  # its launches outlast the GPU
    dominant = dict(re.findall(r"^dominant ops \(([^)]*)\): (.*)$", done.stdout, re.MULTILINE))
    bf16 = next(ops for modes, ops in dominant.items() if "bf16" in modes.split(", "))
    assert "_to_copy" in bf16, done.stdout  # the dominant term, named: autocast's casts
    refused = amp_suite("predict", "--gpu", "H100-SXN", cwd=tmp_path)
    assert refused.returncode == 2 and "did you mean" in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_sync_finishes_a_run_whose_last_call_was_cut_between_its_complete_tag_and_its_status(tiny_run, tmp_path):
    """A tracker that dies between a run's two last calls (the complete tag, then the status) leaves
    it tagged complete but RUNNING: sync ends it with its record's status, not as a killed run.
    (A server killed mid-matrix hit this window in test_tracking_server's outage test.)"""
    import shutil

    from mlflow import MlflowClient

    root, _, done = tiny_run
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    client = MlflowClient(tracking_uri=embedded(out))
    parents, children = nested_runs(out, "tiny")
    cell = next(c for c in children if c.info.status == "FINISHED" and c.data.tags.get("amp_suite.complete") == "true")
    (parent,) = [p for p in parents if p.info.run_id == cell.data.tags["mlflow.parentRunId"]]
    for cut in (parent, cell):
        client.update_run(cut.info.run_id, status="RUNNING")  # its status call never arrived
    synced = amp_suite("sync", str(out), cwd=tmp_path)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert "0 run(s) left open closed as KILLED" in " ".join(synced.stdout.split()), synced.stdout
    assert [client.get_run(cut.info.run_id).info.status for cut in (parent, cell)] == ["FINISHED", "FINISHED"]
