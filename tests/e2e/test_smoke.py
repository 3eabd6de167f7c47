"""The shipped smoke and failure-modes matrices end to end, through the real console script on a
CPU: every workload x every precision, the MLP compiled too, within the smoke matrix's time budget,
and a report that keeps machines apart. `make test-slow` runs this file on its own (conftest.ALONE): the
budget is the machine's, measured while nothing else runs."""

from __future__ import annotations

import json
import math
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import (
    EXPERIMENTS,
    amp_suite,
    assert_one_step_figure,
    embedded,
    nested_runs,
    read_records,
    start_amp_suite,
)

from mlflow import MlflowClient

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    started = time.monotonic()
    matrix = str(EXPERIMENTS / "smoke.yaml")
    # Unmeasured by coverage (conftest.COVERAGE_HANDOFF): the time budget is the product's.
    process = start_amp_suite("run", "--matrix", matrix, "--out", str(out), "--device", "cpu", cwd=out, measured=False)
    # Each pipe is read to its end on a thread of its own, so the main thread can reap the CLI the
    # moment it exits: its exit and the end of its output are two times, taken by whoever sees each.
    readers = [_PipeReader(process.stdout), _PipeReader(process.stderr)]
    process.wait(timeout=600)
    exited = time.monotonic()
    for reader in readers:
        reader.join(timeout=600)
    output_ended = max(reader.ended for reader in readers)
    done = subprocess.CompletedProcess(process.args, process.returncode, readers[0].text, readers[1].text)
    return out, done, time.monotonic() - started, output_ended - exited


class _PipeReader(threading.Thread):
    """Reads one pipe to its end (EOF: every process holding it has closed it) and notes when."""

    def __init__(self, pipe) -> None:
        super().__init__(daemon=True)
        self.pipe, self.text, self.ended = pipe, "", math.inf
        self.start()

    def run(self) -> None:
        self.text = self.pipe.read()
        self.ended = time.monotonic()


@pytest.fixture(scope="module")
def failure_modes_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("failure-modes")
    started = time.monotonic()
    matrix = str(EXPERIMENTS / "failure-modes.yaml")
    done = amp_suite("run", "--matrix", matrix, "--out", str(out), "--device", "cpu", cwd=out, measured=False)
    return out, done, time.monotonic() - started


def children_by_cell(out: Path, experiment: str) -> dict:
    return {run.data.tags["cell_id"]: run for run in nested_runs(out, experiment)[1]}


def test_smoke_matrix_covers_everything_within_three_minutes_report_included(smoke_run):
    out, done, elapsed, output_outlived_exit_s = smoke_run
    assert done.returncode == 0, done.stderr
    assert elapsed < 180, f"smoke matrix took {elapsed:.0f}s"
    # Nothing the run started (its forkserver) holds the output open after it: `| tee` ends with it.
    assert output_outlived_exit_s < 1.0, f"its output ended {output_outlived_exit_s:.2f}s after it exited"
    records = read_records(out)
    assert_one_step_figure(records)
    cells = {(r["workload"], r["precision"]): r for r in records if r["compile"] == "off"}
    assert len(cells) == 5 * 6 and len(records) == 5 * 6 + 6  # and the MLP compiled, in every precision
    compiled = [r for r in records if r["compile"] == "default"]
    assert {r["status"] for r in compiled} == {"ok", "skipped"} and all(r["warmup_s"] or r["reason"] for r in compiled)
    # torch.compile on the CPU (inductor's C++ kernels): the compiling happens in warmup.
    eager, compiled = cells[("mlp", "fp32")], next(r for r in compiled if r["precision"] == "fp32")
    assert compiled["status"] == "ok" and compiled["compile"] == compiled["config"]["compile"] == "default"
    assert compiled["warmup_s"] > eager["warmup_s"] and "compiled (default)" in done.stdout
    assert all(r["status"] == "ok" or (r["status"] == "skipped" and r["reason"]) for r in records)
    fp8 = [r for r in records if r["precision"].startswith("fp8")]
    assert len(fp8) == 12 and all(r["status"] == "skipped" and "run in software" in r["reason"] for r in fp8)
    forced = cells[("mlp", "fp16")]
    assert forced["status"] == "ok" and forced["loss_scale"] > 0  # the GradScaler path ran
    # Time to target on the MLP (90% validation accuracy on digits, evaluated every 10 steps), in every
    # precision that ran: the steps and timed seconds to it, the evaluations' cost apart.
    ran = [p for p in ("fp32", "bf16", "fp16") if cells[("mlp", p)]["status"] == "ok"]  # bf16: where the CPU has it
    assert {"fp32", "fp16"} <= set(ran)
    for precision in ran:
        mlp = cells[("mlp", precision)]
        assert mlp["target"] == 0.9 and mlp["eval_every"] == 10, precision
        assert len(mlp["eval_curve"]) == mlp["steps"] // 10, precision  # every 10 timed steps, the last at the end
        assert mlp["steps_to_target"] <= mlp["warmup_steps"] + mlp["steps"]
        assert 0 < mlp["time_to_target_s"] <= mlp["eval_curve"][-1]["train_s"]
        assert mlp["eval_s"] > 0 and children_by_cell(out, "smoke")[mlp["cell_id"]].data.metrics["time_to_target_s"] > 0
    parents, children = nested_runs(out, "smoke")  # a run per cell that ran; the skipped ones set aside
    assert len(parents) == 1 and len(children) == sum(r["status"] != "skipped" for r in records)
    assert {p.name for p in (out / "report").iterdir()} >= {"report.html", "report.md", "report.json", "figures"}
    # Validation: fp32 learns well above chance (10 classes) without saturating; perplexity is finite.
    for workload in ("resnet", "mlp"):
        accuracy = cells[(workload, "fp32")]["val_metric"]
        assert 0.3 < accuracy < 0.99, (workload, accuracy)
    perplexity = cells[("transformer", "fp32")]["val_metric"]
    assert math.isfinite(perplexity) and 4 < perplexity < 512  # between the chain's floor and uniform
    # BERT and T5 (a vocabulary of 128): below the uniform guess's loss; T5's continuations well above chance.
    for workload in ("bert", "t5"):
        fp32 = cells[(workload, "fp32")]
        assert 0 <= fp32["val_metric"] <= 1 and fp32["val_loss"] < math.log(128), (workload, fp32["val_loss"])
    assert cells[("t5", "fp32")]["val_metric"] > 0.05  # chance is 1/128
    # Every AMP cell that ran has a parity verdict (one seed: indicative), shown and stored on its run;
    # BERT's fp32 predicts masked tokens no better than guessing the commonest one: its parity means nothing.
    bert = cells[("bert", "fp32")]
    assert bert["val_metric"] <= 1.1 * bert["val_metric_chance"] and 0 < bert["val_metric_chance"] < 0.1
    amp = [r for r in records if r["precision"] != "fp32" and r["status"] == "ok"]
    assert amp and "indicative" in done.stdout
    runs = children_by_cell(out, "smoke")
    for record in amp:
        expected = "not judged" if record["workload"] == "bert" else "indicative"
        assert runs[record["cell_id"]].data.tags["parity"] == expected, record["cell_id"]
    markdown = (out / "report" / "report.md").read_text()
    # BERT has an AMP cell only on a CPU with native bf16 (skipped elsewhere: an AMD EPYC here has none).
    if any(r["workload"] == "bert" for r in amp):
        assert "not judged: fp32 did not learn" in done.stdout
        assert re.search(r"\| bert \(mlm acc\) \| 8 \| [\d.]+ \|.*, not judged \|", markdown)


def test_smoke_run_answers_per_workload_first_in_the_report_and_at_the_end_of_the_run(smoke_run):
    out, done = smoke_run[:2]
    report = json.loads((out / "report" / "report.json").read_text())
    answers = report["answer"]
    eager = {a["workload"]: a for a in answers if a["variant"] == "eager"}
    assert set(eager) == {"resnet", "transformer", "bert", "t5", "mlp"} and len(answers) == 6  # and the compiled MLP
    for answer in answers:
        # No mode at all where only fp32 ran (a CPU without bf16 skips every other mode but the forced fp16).
        assert answer["mode"] in (None, "fp32", "tf32", "fp16", "bf16") and answer["sentence"]
        assert answer["sentence"].startswith({"no answer": "no answer", "inconclusive": "inconclusive: "}.get(
            answer["verdict"], "")), answer  # fmt: skip
        assert (answer["mode"] is None) == (answer["verdict"] in ("no answer", "inconclusive")), answer
        assert answer["accuracy"] in ("kept", "at risk", "lost", "not compared")
        if answer["mode"] not in (None, "fp32"):  # an AMP mode is recommended with its figures
            assert answer["speedup"] > 1 and answer["memory_ratio"] and answer["parity"]
    rows = {(r["workload"], r["variant"], r["precision"]): r for r in report["rows"]}
    for answer in answers:  # a recommended AMP mode keeps its accuracy within the tolerance
        if answer["mode"] not in (None, "fp32"):
            row = rows[(answer["workload"], answer["variant"], answer["mode"])]
            worse = row["parity"]["delta"] * (1 if row["val_metric_name"] == "val_perplexity" else -1)
            assert worse <= row["parity"]["tolerance"], (answer, row)
    markdown = (out / "report" / "report.md").read_text()
    assert markdown.index("## The answer") < markdown.index("| ")  # before any other table
    assert "The answer on" in done.stdout and all(a["sentence"][:60] in done.stdout for a in answers)


def test_failure_modes_fp16_without_scaling_fails_parity_and_with_scaling_passes(failure_modes_run):
    out, done, elapsed = failure_modes_run
    assert done.returncode == 0, done.stderr
    assert elapsed < 300, f"failure-modes matrix took {elapsed:.0f}s"
    records = read_records(out)
    runs = children_by_cell(out, "failure-modes")
    amp = [(r["precision"], runs[r["cell_id"]]) for r in records if r["precision"] != "fp32"]
    verdicts = {("bf16", "pass"), ("fp16", "pass"), ("fp16-noscale", "fail")}
    assert {(mode, run.data.tags["parity"]) for mode, run in amp} == verdicts
    # The verdict is the one-sided t test's, over the three seed pairs, with its p-value and margin in each
    # run's diagnostics.json (what MLflow charts is the few figures people compare).
    client = MlflowClient(embedded(out))
    for mode, run in amp:
        with tempfile.TemporaryDirectory() as scratch:
            path = client.download_artifacts(run.info.run_id, "diagnostics.json", scratch)
            found = json.loads(Path(path).read_text())
        assert found["parity_seeds"] == 3 and found["parity_margin"] > 0, (mode, found)
        assert found["parity_p_value"] < 0.05 or mode == "fp16-noscale", (mode, found)
    assert all(r["grad_underflow_fraction"] > 0.9 for r in records)  # the reason, measured
    # Time to target (95% of fp32's final accuracy): every seed is evaluated every 15 steps; the
    # control's learning stalls, and it never gets there; the others do, with an interval over seeds.
    assert all(r["eval_every"] == 15 and len(r["eval_curve"]) == 10 and r["eval_s"] > 0 for r in records)
    # The derived target is resolved when the run's summary is made: each run then gets its own time to it.
    for r in records:
        metrics = runs[r["cell_id"]].data.metrics
        assert ("time_to_target_s" in metrics) == (r["precision"] != "fp16-noscale"), r["cell_id"]
    report = json.loads((out / "report" / "report.json").read_text())
    reach = {r["precision"]: r["time_to_target"] for r in report["rows"]}
    assert (reach["fp16-noscale"]["reached"], reach["fp16-noscale"]["seeds"]) == (0, 3)
    assert reach["fp16-noscale"]["speedup"] is None
    for mode in ("fp32", "bf16", "fp16"):
        assert (reach[mode]["reached"], reach[mode]["seeds"]) == (3, 3) and reach[mode]["seconds"] > 0
    low, high = reach["bf16"]["speedup_interval"]
    assert low < reach["bf16"]["speedup"] < high
    markdown = (out / "report" / "report.md").read_text()
    assert "never (0/3 seeds)" in markdown and "fp16-noscale never reaches 95% of fp32's val_accuracy" in markdown
    assert "fp16-noscale never reaches" in runs_claim(report, "fp16_needs_scaler")


def runs_claim(report: dict, claim: str) -> str:
    return next(c["evidence"] for c in report["claims"] if c["claim"] == claim and c["verdict"] != "not measured here")


def _second_machine(records: list[dict]) -> list[dict]:
    """FIXTURE: the smoke records relabelled as if from an A100 box. Made-up, never a result."""
    relabelled = []
    for number, record in enumerate(records):
        machine = {"device_type": "cuda", "device_name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0",
                   "driver": "fixture", "cuda": "12.8", "torch": "2.14.1", "host": "fixture-second-machine",
                   "tensor_cores": True, "fast_fp16": True, "fast_bf16": True, "tf32": True}  # fmt: skip
        relabelled.append({**record, "record_id": f"fixture-{number}", "device": "cuda", "machine": machine})
        if record["workload"] == "mlp" and record["step_time_ms_p50"] is not None:
            # An A100's MLP step is launch-bound: a few ms, the GPU busy a fifth of it (its traced work).
            step = min(record["step_time_ms_p50"], 2.0)
            relabelled[-1] |= {"step_time_ms_p50": step, "gpu_busy_ms_per_step": step / 5, "gpu_idle_fraction": 0.8}
    return relabelled


def test_report_keeps_machines_apart_and_judges_the_articles_claims(smoke_run, failure_modes_run, tmp_path):
    smoke, fm = smoke_run[0], failure_modes_run[0]
    fixture = tmp_path / "fixture-a100-results.jsonl"
    fixture.write_text("".join(json.dumps(r) + "\n" for r in _second_machine(read_records(smoke))))
    started = time.monotonic()
    done = amp_suite("report", str(smoke), str(fm), str(fixture), "--out", str(tmp_path / "report"), cwd=tmp_path,
                     measured=False)  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())

    assert len(report["machines"]) == 2 and report["records"] == 36 + 12 + 36  # smoke (with compiled MLP), fm
    cpu, a100 = sorted(report["machines"], key=lambda m: m["device_type"] == "cuda")
    assert a100["hosts"] == ["fixture-second-machine"]
    keys = [(r["machine"], r["setup"], r["precision"]) for r in report["rows"]]
    assert len(keys) == len(set(keys)) and {r["machine"] for r in report["rows"]} == {cpu["id"], a100["id"]}
    for row in report["rows"]:
        assert {"workload", "batch_size", "precision", "machine", "throughput", "unit", "speedups",
                "memory_ratio", "parity"} <= row.keys()  # fmt: skip
        assert all(over["baseline"] == name for name, over in row["speedups"].items()), row
    assert {r["unit"] for r in report["rows"]} == {"images/s", "tokens/s", "sequences/s", "samples/s"}

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
