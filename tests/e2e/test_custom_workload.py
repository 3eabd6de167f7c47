"""The user's own model through `amp-suite run`: `workload: custom` in a matrix (a file beside the
matrix, a module), `--model file.py:build`, and every way an entry can fail: before any cell, one
line and exit 2; inside a cell, a failed cell with its reason while the matrix goes on."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from conftest import REPO, amp_suite, read_records

EXAMPLE = REPO / "examples" / "cnn.py"  # a small CNN with its own data, as README shows it

# Beside it, entries that go wrong, importing the example as a neighbour.
BROKEN = """
import dataclasses
import math

import torch

from amp_suite import UserWorkload
from cnn import build


def bad_loss() -> UserWorkload:  # a loss that can't take the model's logits
    return dataclasses.replace(build(), loss=torch.nn.functional.mse_loss)


def bad_metric() -> UserWorkload:  # a metric that is not a number
    return dataclasses.replace(build(), metric=lambda outputs, targets: math.nan)


def raises() -> UserWorkload:
    raise ValueError("the weights file is missing")


def returns_a_dict() -> UserWorkload:  # declared, but not so
    return {"model": None}
"""


def user_folder(tmp_path):
    """The user's code in a folder of its own, outside the repository, with a matrix beside it."""
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(EXAMPLE, folder / "cnn.py")
    (folder / "broken.py").write_text(BROKEN)
    return folder


def write_matrix(folder, *workloads, precisions=("fp32", "bf16", "fp16")):
    matrix = {"name": "mine", "seed": 0, "warmup_steps": 4, "steps": 24, "precisions": list(precisions),
              "workloads": list(workloads)}  # fmt: skip
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


@pytest.mark.slow
def test_a_users_cnn_beside_its_matrix_runs_in_every_mode_with_parity_and_an_answer(tmp_path):
    folder = user_folder(tmp_path)
    entry = {"workload": "custom", "entry": "cnn.py:build", "args": {"channels": 6}, "batch_sizes": [32],
             "lr": 0.01, "unit": "images/s", "force": ["fp16", "bf16"]}  # fmt: skip
    matrix = write_matrix(folder, entry)
    out = tmp_path / "out"
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=tmp_path)  # another cwd
    assert done.returncode == 0, done.stdout + done.stderr
    records = {r["precision"]: r for r in read_records(out)}
    assert set(records) == {"fp32", "bf16", "fp16"} and all(r["status"] == "ok" for r in records.values())
    fp32 = records["fp32"]
    assert fp32["cell_id"] == "cnn/bs32/seed0/fp32"  # called by its file's name
    assert fp32["config"]["workload"]["args"] == {"channels": 6}
    assert fp32["config"]["workload"]["entry"] == f"{folder / 'cnn.py'}:build"  # resolved beside the matrix
    assert fp32["val_metric_name"] == "val_accuracy" and fp32["val_metric"] > 0.5  # it learned
    assert fp32["data_fingerprint"] == records["bf16"]["data_fingerprint"] == records["fp16"]["data_fingerprint"]
    assert fp32["batch_order_hash"] == records["bf16"]["batch_order_hash"]
    assert fp32["loss_curve"][0] == pytest.approx(records["bf16"]["loss_curve"][0], rel=0.05)  # the same weights
    report = json.loads((out / "report" / "report.json").read_text())
    (answer,) = report["answer"]
    assert answer["workload"] == "cnn" and answer["verdict"] in ("recommended", "stay", "inconclusive")
    rows = {row["precision"]: row for row in report["rows"]}
    assert rows["bf16"]["parity"] is not None and rows["fp16"]["parity"] is not None
    assert "images/s" in done.stdout  # the unit the user named


@pytest.mark.slow
def test_model_runs_a_file_entry_from_the_working_directory(tmp_path):
    folder = user_folder(tmp_path)
    done = amp_suite("run", "--model", "cnn.py:build", "--out", "out", "--device", "cpu", "--precisions", "fp32,bf16",
                     "--force", cwd=folder)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = read_records(folder / "out")
    assert [r["status"] for r in records] == ["ok", "ok"] and records[0]["matrix"] == "cnn"
    assert "The answer" in done.stdout


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("no_such_package.models:build", "entry no_such_package.models:build: no module named 'no_such_package'"),
        ("missing.py:build", "missing.py not found"),
        ("cnn.py:no_such_function", "has no function 'no_such_function'"),
        ("broken.py:raises", "raised ValueError: the weights file is missing (at broken.py:"),
        ("broken.py:returns_a_dict", "returned dict; it must return amp_suite.UserWorkload"),
    ],
)
def test_an_entry_that_cannot_run_is_one_line_and_exit_2_before_any_cell(tmp_path, entry, says):
    folder = user_folder(tmp_path)
    matrix = write_matrix(folder, {"workload": "custom", "entry": entry, "batch_sizes": [32]})
    out = tmp_path / "out"
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=folder)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("amp-suite: error: ") and says in lines[0], done.stderr
    assert not (out / "results.jsonl").exists()  # nothing ran, nothing written


@pytest.mark.slow
def test_a_loss_that_cannot_take_the_output_and_a_metric_that_is_not_a_number_fail_their_cells_only(tmp_path):
    folder = user_folder(tmp_path)
    good = {"workload": "custom", "entry": "cnn.py:build", "batch_sizes": [32], "label": "good"}
    bad_loss = {**good, "entry": "broken.py:bad_loss", "label": "bad-loss"}
    bad_metric = {**good, "entry": "broken.py:bad_metric", "label": "bad-metric"}
    matrix = write_matrix(folder, bad_loss, bad_metric, good, precisions=("fp32",))
    out = tmp_path / "out"
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=folder)
    assert done.returncode == 3, done.stdout + done.stderr  # cells failed; the run itself did not
    records = {r["workload"]: r for r in read_records(out)}
    assert records["good"]["status"] == "ok"
    assert records["bad-loss"]["status"] == "failed"
    assert records["bad-loss"]["reason"].startswith("RuntimeError: The size of tensor a (4) must match")
    bad_metric = records["bad-metric"]
    assert bad_metric["status"] == "failed" and "the metric accuracy of" in bad_metric["reason"]
    assert bad_metric["reason"].endswith("is nan: it must be a finite number")


def test_model_and_matrix_together_are_refused(tmp_path):
    done = amp_suite("run", "--model", "cnn.py:build", "--matrix", "smoke", "--out", "out", cwd=tmp_path)
    assert done.returncode == 2 and "--model and --matrix: choose one" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
