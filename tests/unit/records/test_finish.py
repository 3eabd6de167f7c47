"""records.finish: the one place a cell's record is finished with what the stages after the cell add."""

from __future__ import annotations

import pytest
from conftest import tiny_matrix

from amp_suite.config import Matrix
from amp_suite.records.finish import FieldCollision, finished, merged
from amp_suite.records.results import CellRecord

SPEC = Matrix.model_validate(tiny_matrix()).cells("cpu")[0]
RECORD = CellRecord.for_spec(SPEC, "ok", throughput=100.0, environment={"torch": "2.x"})


def test_each_stages_fields_land_in_one_validated_record():
    record = finished(
        RECORD,
        {
            "worker": {"log_path": "logs/a.log"},
            "comparison": {"ran_alone": "no seat"},
            "runner": {"record_id": "r1", "invocation_id": "i1", "environment": {"torch": "2.x", "image": "x:1"}},
        },
    )
    assert (record.log_path, record.ran_alone, record.record_id) == ("logs/a.log", "no seat", "r1")
    assert record.environment == {"torch": "2.x", "image": "x:1"} and record.throughput == 100.0
    assert RECORD.log_path is None  # a new record: the cell's is untouched


def test_a_field_two_stages_give_is_refused_naming_both():
    with pytest.raises(FieldCollision, match="log_path is given twice: by worker and by runner"):
        finished(RECORD, {"worker": {"log_path": "a.log"}, "runner": {"record_id": "r1", "log_path": "b.log"}})


def test_a_stage_may_replace_the_cells_own_value_once():
    """The batch search records the cell under its own identity (batch "auto"), not the batch it ran."""
    record = finished(RECORD, {"batch search": {"cell_id": "tiny/auto", "config_hash": "h0"}})
    assert (record.cell_id, record.config_hash) == ("tiny/auto", "h0")


def test_the_finished_record_is_validated():
    with pytest.raises(ValueError, match="not fields of a cell record: log_pth"):
        finished(RECORD, {"worker": {"log_pth": "a.log"}})
    with pytest.raises(ValueError, match="throughput"):
        finished(RECORD, {"runner": {"throughput": -1.0}})  # an ok cell's rate is positive


def test_nothing_added_is_the_record_itself():
    assert finished(RECORD, {"batch search": {}, "comparison": {}}) is RECORD


def test_merged_keeps_every_part_and_refuses_a_repeated_key():
    assert merged({"a": {"x": 1}, "b": {"y": None}, "c": {}}) == {"x": 1, "y": None}
    with pytest.raises(FieldCollision, match="y is given twice: by b and by c"):
        merged({"a": {"x": 1}, "b": {"y": 2}, "c": {"y": 2}})  # even an equal value: two owners
