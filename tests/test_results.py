from __future__ import annotations

from conftest import tiny_matrix

from amp_suite.config import Matrix
from amp_suite.results import CellRecord, ResultsFile


def _record(precision="fp32", **fields):
    spec = next(c for c in Matrix.model_validate(tiny_matrix()).cells("cpu") if c.precision == precision)
    return CellRecord.for_spec(spec, fields.pop("status", "ok"), **fields)


def test_append_then_read_round_trips(tmp_path):
    results = ResultsFile(tmp_path / "results.jsonl")
    first, second = _record(throughput=10.0), _record("bf16", throughput=12.0, loss_curve=[2.0, 1.5])
    results.append(first)
    results.append(second)
    records, bad = results.read()
    assert bad == 0 and records == [first, second]
    assert records[1].config["workload"]["workload"] == "mlp"


def test_a_truncated_last_line_is_skipped_and_never_extended(tmp_path):
    path = tmp_path / "results.jsonl"
    results = ResultsFile(path)
    results.append(_record())
    with path.open("a") as handle:
        handle.write('{"cell_id": "cut off by a cra')  # what a kill mid-write leaves
    results.append(_record("bf16"))
    records, bad = results.read()
    assert [r.precision for r in records] == ["fp32", "bf16"] and bad == 1


def test_unknown_fields_from_other_versions_are_kept(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(_record().model_dump_json()[:-1] + ', "added_later": 1}\n')
    records, bad = ResultsFile(path).read()
    assert bad == 0 and records[0].model_extra == {"added_later": 1}
