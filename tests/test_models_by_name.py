"""Architectures by name, without code: `workload: torchvision` with a classification model the
suite does not ship (mobilenet_v3_small), through `amp-suite run`, offline; a name torchvision
does not list is one line and exit 2, with the names it is close to."""

from __future__ import annotations

import pytest
import yaml
from conftest import amp_suite, read_records


def matrix_file(tmp_path, workload: dict, precisions=("fp32", "bf16")):
    matrix = {"name": "by-name", "seed": 0, "warmup_steps": 2, "steps": 12, "precisions": list(precisions),
              "workloads": [workload]}  # fmt: skip
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


@pytest.mark.slow
def test_a_torchvision_model_the_suite_does_not_ship_runs_by_name_to_an_answer(tmp_path):
    workload = {"workload": "torchvision", "model": "mobilenet_v3_small", "image_size": 32, "num_classes": 10,
                "batch_sizes": [16], "samples": 256, "data": {"source": "digits", "val_samples": 64},
                "force": ["bf16"]}  # fmt: skip
    out = tmp_path / "out"
    done = amp_suite("run", "--matrix", str(matrix_file(tmp_path, workload)), "--out", str(out), "--device", "cpu",
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = {r["precision"]: r for r in read_records(out)}
    assert [records[p]["status"] for p in ("fp32", "bf16")] == ["ok", "ok"]
    assert records["fp32"]["cell_id"] == "mobilenet_v3_small/bs16/seed0/fp32"  # called by the model's name
    assert records["fp32"]["flops_per_step"] and records["fp32"]["val_metric_name"] == "val_accuracy"
    assert "images/s" in done.stdout and "The answer" in done.stdout


def test_a_name_torchvision_does_not_list_is_one_line_with_the_close_ones(tmp_path):
    workload = {"workload": "torchvision", "model": "mobilenet_v3_smal", "batch_sizes": [16]}
    out = tmp_path / "out"
    done = amp_suite("run", "--matrix", str(matrix_file(tmp_path, workload)), "--out", str(out), "--device", "cpu",
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "torchvision has no classification model 'mobilenet_v3_smal': did you mean mobilenet_v3_small" in line
    assert not (out / "results.jsonl").exists()
