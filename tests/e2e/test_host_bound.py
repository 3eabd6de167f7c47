"""The GPU's own work, through the CLI: a stand-in stream (scripts/simulated_stream) behind a host
that launches slowly, then one that launches at no cost, through `amp-suite run` and `summary`. The
trace separates the two: the same method, the same records, the bound the answer names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, read_records

pytestmark = pytest.mark.slow
STAND_IN = Path(__file__).resolve().parents[2] / "scripts" / "simulated_stream"


def run(root: Path, name: str, launch_us: int, workload: dict, precisions: list[str]):
    matrix = {"name": name, "seed": 0, "warmup_steps": 6, "steps": 12, "precisions": precisions, "stopping": "fixed",
              "workloads": [{"workload": "mlp", "force": precisions, **workload}]}  # fmt: skip
    (root / f"{name}.yaml").write_text(yaml.safe_dump(matrix))
    env = {"PYTHONPATH": str(STAND_IN), "SIMULATED_LAUNCH_US": str(launch_us), "COLUMNS": "200"}
    out = root / name
    matrix_file = str(root / f"{name}.yaml")
    done = amp_suite("run", "--matrix", matrix_file, "--out", str(out), "--device", "cpu", cwd=root, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_a_slow_host_and_a_busy_gpu_are_told_apart_and_the_answer_names_the_bound(tmp_path):
    slow, done = run(tmp_path, "slow-host", 2000, {"hidden": 32, "depth": 2, "batch_sizes": [8], "samples": 64},
                     ["fp32", "bf16"])  # fmt: skip
    busy, _ = run(tmp_path, "busy-gpu", 0, {"hidden": 1024, "depth": 3, "batch_sizes": [256], "samples": 512},
                  ["fp32"])  # fmt: skip
    host_bound = read_records(slow)
    gpu_bound = read_records(busy)
    assert all(r["status"] == "ok" and r["gpu_busy_ms_per_step"] > 0 for r in host_bound + gpu_bound)
    # 2 ms a launch for ops that take microseconds: the device idles most of every step.
    assert all(r["gpu_idle_fraction"] > 0.6 for r in host_bound), [r["gpu_idle_fraction"] for r in host_bound]
    (big,) = gpu_bound
    assert big["gpu_idle_fraction"] < min(r["gpu_idle_fraction"] for r in host_bound) / 2, big["gpu_idle_fraction"]
    assert all(0 <= r["gpu_idle_fraction"] < 1 for r in host_bound + gpu_bound)
    rows = json.loads((busy / "report" / "report.json").read_text())["rows"]
    assert rows[0]["bound"]["bound"] != "host-bound" and rows[0]["bound"]["measured"]

    summary = amp_suite("summary", str(slow), cwd=tmp_path, env={"COLUMNS": "200"})
    assert summary.returncode == 0, summary.stderr
    text = " ".join(summary.stdout.split())
    assert "host-bound: kernel launches, not the GPU, set the pace" in text, text
    assert "fp32 host-bound (GPU busy" in text and "What would change it: CUDA graphs" in text
    assert "quiet machine" not in text and "machine changed" not in text
    report = json.loads((slow / "report" / "report.json").read_text())
    (bf16,) = [row for row in report["rows"] if row["precision"] == "bf16"]
    assert bf16["bound"]["bound"] == "host-bound" and bf16["gpu_work_ratio"]["baseline"] == "fp32"
    assert "GPU work vs fp32" in done.stdout  # the terminal's column


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "h200-gpu-check-2026-12-04.jsonl"


def test_the_first_leases_records_read_host_bound_with_figures_never_as_a_machine_that_moved(tmp_path):
    """The H200 lease's LM (records without a trace): its AMP cells host-bound, inferred from MFU and
    power, in summary and report; no quiet machine to rerun on; the tensor-core claim not judged."""
    run_dir = tmp_path / "h200"
    run_dir.mkdir()
    (run_dir / "results.jsonl").write_text(FIXTURE.read_text())
    summary = amp_suite("summary", str(run_dir), cwd=tmp_path, env={"COLUMNS": "200"})
    report = amp_suite("report", str(run_dir), "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert summary.returncode == 0 and report.returncode == 0, summary.stderr + report.stderr
    built = json.loads((tmp_path / "report" / "report.json").read_text())
    # What the report says of these records: its tables' rows (the intros define terms in general).
    markdown = "\n".join(line for line in (tmp_path / "report" / "report.md").read_text().splitlines() if "|" in line)
    (answer,) = built["answer"]
    for text in (" ".join(summary.stdout.split()), answer["sentence"], markdown):
        assert "tf32, fp16, bf16 host-bound: kernel launches, not the GPU, set the pace" in text
        assert "bf16 host-bound (2.8% MFU at 236 W in a 22.6 ms step, inferred from MFU)" in text
        assert "fp32 gpu-bound (48.0% MFU at 543 W" in text
        assert "quiet machine" not in text and "machine changed" not in text and "noisy" not in text
    bounds = {row["precision"]: row["bound"]["bound"] for row in built["rows"]}
    assert bounds == {"fp32": "gpu-bound", "tf32": "host-bound", "fp16": "host-bound", "bf16": "host-bound"}
    (tensor_cores,) = [c for c in built["claims"] if c["claim"] == "tensor_core_speedup"]
    assert tensor_cores["verdict"] == "not measured here" and "host-bound" in tensor_cores["evidence"]
