"""prediction.json's rows as the report reads them back: a row no estimate makes is refused, by
the field it is wrong in, so the report leaves the file out in one line (report.sources)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from amp_suite.report.prediction import PredictionFile

ROW = {"gpu": "NVIDIA H200 SXM", "workload": "transformer (gpu-check)", "batch": 16, "precision": "bf16",
       "baseline": "fp32", "estimated": 1.2, "step_ms": 10.0, "bound": "host", "dominant": ["backward mm"]}  # fmt: skip


def read(**changed) -> PredictionFile:
    return PredictionFile.model_validate_json(json.dumps({"made_at": "2026-12-07", "estimated": [ROW | changed]}))


def test_a_row_as_predict_writes_it_is_read_back():
    (row,) = read(measured=1.1, gpu_ms=3.0, host_ms=4.0, launch_us=5.0).estimated
    assert row.error == pytest.approx(1.2 / 1.1 - 1)


BAD = [("measured", 0), ("measured", -1.0), ("measured", "Infinity"), ("estimated", "NaN"), ("estimated", 0),
       ("step_ms", -1.0), ("gpu_ms", "NaN"), ("launch_us", 0), ("batch", 0), ("measured_step_ms", "-Infinity"),
       ("gpu", "x" * 5000), ("dominant", ["op"] * 1000)]  # fmt: skip


@pytest.mark.parametrize("field, value", BAD, ids=[f"{field}-{str(value)[:12]}" for field, value in BAD])
def test_a_row_no_estimate_makes_is_refused_by_its_field(field, value):
    with pytest.raises(ValidationError) as refused:
        read(**{field: value})
    assert refused.value.errors()[0]["loc"][:3] == ("estimated", 0, field)
