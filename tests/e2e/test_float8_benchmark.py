"""torchao's float8 single-linear benchmark through the suite (issue 51): the shipped matrix as
gpu-check's rehearsal cuts it, run by `amp-suite run` on this CPU (its times the ops' CPU times,
not judged), and the report's row for a published figure of its shape: the measured ratio beside
the published one and `amp-suite predict`'s estimate."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from conftest import EXPERIMENTS, REPO, amp_suite, read_records

SHIPPED = REPO / "amp_suite" / "references" / "torchao-float8.yaml"
H200_RECORDS = REPO / "tests" / "fixtures" / "h200-gpu-check-2026-12-04.jsonl"


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory):
    """The float8-bench stage's matrix, cut as scripts/gpu-check.sh --rehearse cuts it, run on the CPU."""
    folder = tmp_path_factory.mktemp("float8")
    small = folder / "torchao-float8.yaml"
    cut = [sys.executable, str(REPO / "scripts" / "gpu_check_rehearsal.py"), str(EXPERIMENTS / "torchao-float8.yaml")]
    subprocess.run([*cut, str(small)], check=True)
    matrix = yaml.safe_load(small.read_text())
    small.write_text(yaml.safe_dump({**matrix, "workloads": matrix["workloads"][:1]}))  # one shape is enough here
    done = amp_suite("run", "--matrix", str(small), "--out", "run", "--device", "cpu", "--force", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder, matrix["workloads"][0], done.stdout


@pytest.mark.slow
@pytest.mark.xdist_group("float8")  # one worker: the rehearsed run is made once
def test_the_benchmark_runs_as_cells_timed_by_their_ops_and_is_not_judged_on_a_cpu(rehearsed):
    folder, workload, said = rehearsed
    records = read_records(folder / "run")
    assert [r["precision"] for r in records] == ["bf16", "fp8-tensorwise", "fp8-rowwise"]
    for record in records:
        assert record["status"] == "ok", record["reason"]
        assert record["workload"] == "float8-linear-small" and record["compile"] == "default"
        assert record["kernel_ms_per_step"] > 0 and len(record["throughput_windows"]) == record["steps"]
        if not record["windows_set_aside"]:  # the rate is M rows an iteration over the mean iteration's time
            assert record["throughput"] == pytest.approx(record["batch_size"] / (record["kernel_ms_per_step"] / 1e3))
        assert record["val_metric"] is None and record["side_by_side_id"] is None  # nothing learned; alone
    assert [r.get("fp8_layers") for r in records] == [None, 1, 1]  # the Linear, swapped for a Float8Linear
    assert "not judged: on a CPU the benchmark's times are its ops' CPU times" in " ".join(said.split())  # unwrapped


@pytest.mark.slow
@pytest.mark.xdist_group("float8")
def test_the_report_holds_the_rehearsal_against_the_published_figure_and_predicts_estimate(rehearsed):
    folder, workload, _ = rehearsed
    moved_to_the_rehearsals_shape(workload, folder / "references.yaml")
    done = amp_suite("report", "run", "--references", "references.yaml", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((folder / "run" / "report" / "report.json").read_text())
    [row] = report["references"]
    records = {r["precision"]: r for r in read_records(folder / "run")}
    measured = records["fp8-tensorwise"]["throughput"] / records["bf16"]["throughput"]
    assert row["verdict"] == "not judged" and "CPU times" in row["why"] and row["published"] == 0.80
    assert row["measured"] == pytest.approx(measured)
    assert row["estimated"] is not None and row["estimated"] > 0  # predict's, on the publisher's H100
    markdown = (folder / "run" / "report" / "report.md").read_text()
    assert "torchao-float8-linear-rehearsal" in markdown and f"{row['estimated']:.2f}" in markdown


@pytest.mark.slow
@pytest.mark.xdist_group("float8")
def test_a_lease_on_another_gpu_than_the_publishers_still_shows_its_figure_not_judged(rehearsed, tmp_path):
    """An H200 lease's records of the benchmark (the rehearsal's, on the first lease's H200 machine):
    the report shows the measured ratio on that GPU beside the H100's figure and predict's estimate."""
    folder, workload, _ = rehearsed
    h200 = json.loads(H200_RECORDS.read_text().splitlines()[0])
    on_h200 = {key: h200[key] for key in ("device", "device_name", "environment", "machine")}
    lease = tmp_path / "lease"
    lease.mkdir()
    lines = [json.dumps({**record, **on_h200}) for record in read_records(folder / "run")]
    (lease / "results.jsonl").write_text("\n".join(lines) + "\n")
    moved_to_the_rehearsals_shape(workload, tmp_path / "references.yaml")
    done = amp_suite("report", "lease", "--references", "references.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads((lease / "report" / "report.json").read_text())["references"]
    assert row["verdict"] == "not judged" and row["published"] == 0.80 and row["measured"] > 0
    assert row["why"].startswith("measured on H200, not the publisher's H100 80GB HBM3") and row["estimated"] > 0
    markdown = (lease / "report" / "report.md").read_text()
    assert "| torchao-float8-linear-rehearsal | H100 80GB HBM3 |" in markdown and "measured on H200" in markdown


def moved_to_the_rehearsals_shape(workload: dict, path) -> None:
    """The shipped small shapes' figure, moved to the rehearsal's shape, as a references file."""
    shipped = yaml.safe_load(SHIPPED.read_text())
    entry = shipped["references"][0]
    shape = {"batch_size": workload["batch_sizes"][0], "in_features": workload["in_features"],
             "out_features": workload["out_features"]}  # fmt: skip
    entry = {**entry, "id": "torchao-float8-linear-rehearsal", "config": {**entry["config"], **shape}}
    path.write_text(yaml.safe_dump({**shipped, "references": [entry]}))


def test_the_shipped_figures_match_the_shipped_matrix_and_leave_no_benchmark_beyond_reach():
    """Each published shape is a workload of experiments/torchao-float8.yaml, in the reference's terms."""
    from amp_suite.config import load_matrix
    from amp_suite.report.references import load_references, same_config

    matrix = load_matrix(EXPERIMENTS / "torchao-float8.yaml")
    figures = [r for r in load_references("torchao-float8")]
    assert len(figures) == 2 and not any(r.needs for r in figures)
    for figure in figures:
        ran = [w for w in matrix.workloads if w.batch_sizes == [figure.config["batch_size"]]
               and same_config({**w.model_dump(), "compile": "default"}, figure.config)]  # fmt: skip
        assert len(ran) == 1, figure.id
        assert {figure.precision, figure.baseline} <= set(matrix.precisions)
