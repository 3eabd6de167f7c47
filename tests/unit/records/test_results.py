from __future__ import annotations

import errno
import json
import math
import os

import pytest
from conftest import REPO, amp_suite, tiny_matrix
from pydantic import ValidationError

from amp_suite.config import Matrix
from amp_suite.records import jsonl
from amp_suite.records.jsonl import LineWriteError
from amp_suite.records.results import CellRecord, ResultsFile


def _record(precision="fp32", **fields):
    spec = next(c for c in Matrix.model_validate(tiny_matrix()).cells("cpu") if c.precision == precision)
    return CellRecord.for_spec(spec, fields.pop("status", "ok"), **fields)


def test_append_then_read_round_trips(tmp_path):
    results = ResultsFile(tmp_path / "results.jsonl")
    first, second = _record(throughput=10.0), _record("bf16", throughput=12.0, loss_curve=[2.0, 1.5])
    results.append(first)
    results.append(second)
    records, bad = results.read()
    assert bad == 0 and [r.model_dump() for r in records] == [first.model_dump(), second.model_dump()]
    assert records[1].config["workload"]["workload"] == "mlp"


def test_a_record_is_closed_when_written_a_misspelt_field_is_an_error():
    with pytest.raises(ValidationError, match="throughput_per_s"):
        _record(throughput_per_s=10.0)
    with pytest.raises(ValidationError, match="gpu"):
        _record(machine={"device_type": "cuda", "device_name": "x", "gpu": "A100"})


def test_an_updated_record_is_validated_like_a_new_one():
    """What the runner, worker and fleet add to a record after the cell: a misspelt field or a
    wrong type is an error, as when the record was made (model_copy(update=...) let both through)."""
    record = _record(throughput=10.0)
    assert record.updated(log_path="logs/a.log").log_path == "logs/a.log" and record.log_path is None
    with pytest.raises(ValueError, match="not fields of a cell record: log_pth"):
        record.updated(log_pth="logs/a.log")
    with pytest.raises(ValidationError, match="throughput"):
        record.updated(throughput="fast")
    with pytest.raises(ValidationError, match="status ok with throughput -1.0"):  # the record's own rules hold
        record.updated(throughput=-1.0)


def test_a_stored_record_keeps_a_newer_versions_fields_when_updated(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(json.loads(_record(throughput=1.0).model_dump_json()) | {"added_later": 1}) + "\n")
    (stored,), _ = ResultsFile(path).read()
    assert stored.updated(log_path="x.log").model_extra == {"added_later": 1}


def test_a_line_older_than_the_machine_field_gets_one_from_its_environment(tmp_path):
    path = tmp_path / "results.jsonl"
    old = json.loads(_record(throughput=1.0).model_dump_json(exclude={"machine", "parity_rule", "record_id"}))
    old["device"] = "cuda"
    old["environment"] = {"device_name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "driver": "550.54",
                          "cuda": "12.8", "torch": "2.14.1", "hostname": "box-a"}  # fmt: skip
    path.write_text(json.dumps(old) + "\n")
    (record,), bad = ResultsFile(path).read()
    assert bad == 0 and record.parity_rule is None
    assert record.machine.model_name == "A100-SXM4-80GB" and record.machine.host == "box-a"
    assert record.machine.fast_bf16 is True and record.machine.tensor_cores is True
    assert "driver 550.54" in record.machine.key and "box-a" not in record.machine.key  # hosts pool


def test_a_truncated_last_line_is_skipped_and_never_extended(tmp_path):
    path = tmp_path / "results.jsonl"
    results = ResultsFile(path)
    results.append(_record())
    with path.open("a") as handle:
        handle.write('{"cell_id": "cut off by a cra')  # what a kill mid-write leaves
    results.append(_record("bf16"))
    records, bad = results.read()
    assert [r.precision for r in records] == ["fp32", "bf16"] and bad == 1


def test_unknown_fields_from_other_versions_are_kept_when_read(tmp_path):
    path = tmp_path / "results.jsonl"
    machine = '"machine": {"device_type": "cpu", "device_name": "x", "added_later": 2}'
    path.write_text(_record().model_dump_json()[:-1] + ', "added_later": 1, ' + machine + "}\n")
    records, bad = ResultsFile(path).read()
    assert bad == 0 and records[0].model_extra == {"added_later": 1}
    assert records[0].machine.device_name == "x"


def test_non_finite_numbers_are_written_as_strict_json_and_read_back(tmp_path):
    path = tmp_path / "results.jsonl"
    nan, inf = float("nan"), float("inf")
    record = _record(status="diverged", final_loss=nan, loss_curve=[1.0, inf, -inf, nan], val_metrics={"val_loss": nan})
    ResultsFile(path).append(record)

    def no_bare_constants(name):
        raise AssertionError(f"bare {name} in results.jsonl")

    line = json.loads(path.read_text(), parse_constant=no_bare_constants)  # strict JSON: no NaN tokens
    assert line["final_loss"] == "NaN" and line["loss_curve"] == [1.0, "Infinity", "-Infinity", "NaN"]
    (back,), bad = ResultsFile(path).read()
    assert bad == 0 and back.status == "diverged" and math.isnan(back.final_loss)
    assert back.loss_curve[:3] == [1.0, inf, -inf] and math.isnan(back.val_metrics["val_loss"])


def test_lines_that_are_not_utf8_or_not_records_are_skipped_and_counted(tmp_path):
    path = tmp_path / "results.jsonl"
    results = ResultsFile(path)
    results.append(_record())
    with path.open("ab") as handle:
        handle.write(b"\xff\xfe not utf-8\n[1, 2]\n{\"cell_id\": \"missing every other field\"}\n")
    results.append(_record("bf16"))
    records, bad = results.read()
    assert [r.precision for r in records] == ["fp32", "bf16"] and bad == 3


def test_a_write_that_fails_part_way_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    results = ResultsFile(path)
    results.append(_record())
    before = path.read_bytes()
    real_write = os.write

    def disk_fills_up(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))  # half the line reaches the disk, then it is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonl.os, "write", disk_fills_up)
    with pytest.raises(LineWriteError, match="No space left on device"):
        results.append(_record("bf16"))
    monkeypatch.undo()
    assert path.read_bytes() == before
    results.append(_record("bf16"))  # once there is room, appends go on from a clean line end
    assert [r.precision for r in results.read()[0]] == ["fp32", "bf16"]


TODAYS_LINES = REPO / "tests" / "fixtures" / "results-2026-12-01.jsonl"  # amp-suite 0.1.0 at 81a76bb, smoke.yaml


def test_records_written_by_an_earlier_version_still_read_and_report(tmp_path):
    """Lines as the suite wrote them on 2026-12-01 (when a record named its MLflow run
    `mlflow_run_id`): every one reads, keeps its figures, and `amp-suite report` builds from them."""
    written = [json.loads(line) for line in TODAYS_LINES.read_text().splitlines()]
    records, unreadable = ResultsFile(TODAYS_LINES).read()
    assert unreadable == 0 and len(records) == len(written) == 6
    for record, line in zip(records, written, strict=True):
        assert record.tracker_run_id == line["mlflow_run_id"] and "mlflow_run_id" not in record.model_dump()
        kept = (record.cell_id, record.status, record.throughput)
        assert kept == (line["cell_id"], line["status"], line["throughput"])
    folder = tmp_path / "old-run"
    folder.mkdir()
    (folder / "results.jsonl").write_text(TODAYS_LINES.read_text())
    done = amp_suite("report", str(folder), "--out", str(tmp_path / "report"), "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "report" / "report.json").read_text())["rows"]
    fp16 = next(r for r in rows if r["precision"] == "fp16" and r["variant"] == "eager")
    assert fp16["status"] == "ok" and 0 < fp16["speedups"]["fp32"]["value"] < 1  # emulated fp16, against fp32


@pytest.mark.parametrize("written, shown", [("NaN", "NaN"), ("Infinity", "inf"), (0.0, "0"), (-1.0, "-1")])
def test_a_window_no_cell_measures_is_set_aside_as_read_and_written_back_as_read(tmp_path, written, shown):
    """One rule where records are read: such a window joins the hiccups' set aside (summary, speedup
    and report leave those out and list them); the line's other windows and fields count."""
    line = json.loads(_record(throughput=10.0, throughput_windows=[10.0, 11.0, 9.0]).model_dump_json())
    line["throughput_windows"][1] = written
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(line) + "\n")
    results = ResultsFile(path)
    (stored,), unreadable = results.read()
    assert unreadable == 0
    (aside,) = stored.windows_set_aside
    assert aside.window == 1 and f"not a positive, finite rate ({shown} samples/s)" in aside.reason
    again = type(stored).model_validate_json(stored.model_dump_json())  # as sync writes it, and reads it back
    assert again.model_dump_json() == stored.model_dump_json() and len(again.windows_set_aside) == 1


def test_a_line_repeated_with_a_nan_window_is_one_record_not_a_conflict(tmp_path):
    from amp_suite.records.results import DistinctRecords

    line = json.loads(_record(throughput=10.0, throughput_windows=[10.0, 11.0]).model_dump_json())
    line["throughput_windows"][0] = "NaN"
    path = tmp_path / "results.jsonl"
    path.write_text((json.dumps(line) + "\n") * 2)
    records, _ = ResultsFile(path).read()
    distinct = DistinctRecords()
    distinct.add(records)
    assert (len(distinct.records), distinct.repeated, distinct.conflicting) == (1, 1, 0)
