"""Records and prediction files no cell or command writes, read through the CLI (issue 52): a
window of NaN, Infinity, 0 or -1 samples/s in `throughput_windows`, and a prediction.json row that
measured a speedup of 0. Each crashed summary, report or predict with a traceback.

The rule for windows, in one place (records.results.StoredRecord): a window that is not a positive,
finite rate is set aside as read, as a hiccup's window is, so it is left out of the record's
figures and listed under the tables, and the rest of the record counts."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REPO, amp_suite

H200_RECORDS = REPO / "tests" / "fixtures" / "h200-gpu-check-2026-12-04.jsonl"
# The mode whose third window is replaced, and by what (as results.jsonl writes NaN and infinity).
BAD_WINDOWS = {"tf32": "NaN", "fp32": "Infinity", "fp16": 0.0, "bf16": -1.0}
SAID = {"tf32": "NaN", "fp32": "inf", "fp16": "0", "bf16": "-1"}


@pytest.fixture
def bad_windows(tmp_path):
    """The H200's run folder, each mode's third window of six one that no cell measures."""
    run = tmp_path / "windows"
    run.mkdir()
    lines = []
    for record in map(json.loads, H200_RECORDS.read_text().splitlines()):
        record["throughput_windows"][2] = BAD_WINDOWS[record["precision"]]
        lines.append(json.dumps(record))
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    return run


def _said(text: str) -> str:
    return " ".join(text.split())


def _lists_every_bad_window(text: str) -> None:
    for mode, value in SAID.items():
        assert f"transformer {mode}: seed 0 window 3 of 6: not a positive, finite rate ({value}" in text, (mode, text)


def test_summary_sets_aside_windows_no_cell_measures_and_lists_them(bad_windows, tmp_path):
    done = amp_suite("summary", str(bad_windows), cwd=tmp_path, env={"COLUMNS": "250"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "4 records" in done.stdout, done.stdout
    _lists_every_bad_window(_said(done.stdout))
    assert "The answer on" in done.stdout  # the other five windows of each still count


def test_report_sets_aside_windows_no_cell_measures_and_lists_them(bad_windows, tmp_path):
    done = amp_suite("report", str(bad_windows), "--format", "md,json", cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    _lists_every_bad_window(_said((bad_windows / "report" / "report.md").read_text()))


def test_predict_sets_aside_windows_no_cell_measures_and_says_so(bad_windows, tmp_path):
    """The LM made small (what is checked is the reading, not the estimate): its profile takes a second."""
    lines = [json.loads(line) for line in (bad_windows / "results.jsonl").read_text().splitlines()]
    for record in lines:
        record["config"]["workload"].update(n_layer=1, n_embd=32, n_head=2, seq_len=32, vocab_size=256)
    (bad_windows / "results.jsonl").write_text("".join(json.dumps(record) + "\n" for record in lines))
    done = amp_suite("predict", "--results", str(bad_windows), cwd=tmp_path, env={"COLUMNS": "250"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    said = _said(done.stdout)
    _lists_every_bad_window(said)  # "measured transformer fp32: seed 0 window 3 of 6: ..."
    assert "error on 3 measured speedup(s)" in said, said


def test_a_prediction_row_that_measured_zero_is_refused_in_one_line_and_the_report_goes_on(tmp_path):
    """Before: ZeroDivisionError in the report (the row's error is estimated / measured - 1)."""
    run = tmp_path / "h200"
    run.mkdir()
    shutil.copy(H200_RECORDS, run / "results.jsonl")
    row = {"gpu": "NVIDIA H200 SXM", "workload": "transformer (gpu-check)", "batch": 16, "precision": "bf16",
           "baseline": "fp32", "estimated": 1.2, "step_ms": 10.0, "bound": "host", "dominant": [],
           "measured": 0}  # fmt: skip
    (run / "prediction.json").write_text(json.dumps({"made_at": "2026-12-07T00:00:00+00:00", "estimated": [row]}))
    done = amp_suite("report", str(run), "--format", "md", cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    warnings = [line for line in done.stderr.splitlines() if "prediction.json" in line]
    assert len(warnings) == 1 and "left out of the report" in warnings[0], done.stderr
    assert "estimated.0.measured" in warnings[0] and "greater than 0" in warnings[0], warnings
    assert "Estimated against measured" not in (run / "report" / "report.md").read_text()


@pytest.mark.parametrize("command", [("summary",), ("report", "--format", "md,json")])
def test_records_of_a_device_this_build_has_no_backend_for_read_as_the_hosts(tmp_path, command):
    """A results.jsonl from a build with another kind of device ("mps"): before, the first backend
    lookup raised and the summary or report stopped; now such a device reads as the host's own."""
    run = tmp_path / "mps"
    run.mkdir()
    lines = []
    for record in map(json.loads, H200_RECORDS.read_text().splitlines()):
        record["device"] = record["machine"]["device_type"] = "mps"
        lines.append(json.dumps(record))
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    done = amp_suite(*command, str(run), cwd=tmp_path, env={"COLUMNS": "250"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    said = _said(done.stdout if command[0] == "summary" else (run / "report" / "report.md").read_text())
    assert "transformer" in said and "bf16" in said, said
