"""Each derived quantity is declared once (analysis.derived), and the surfaces loop over the
declarations (issue 54): a quantity declared here appears, in its words, in the terminal's table,
the report's Markdown and HTML, and each cell's MLflow diagnostics, with nothing else changed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.fixture_records import A100, MLP, records, three
from support.surfaces import surfaces

from amp_suite.analysis import derived
from amp_suite.analysis.derived import DERIVED, EVERYWHERE, MLFLOW, REPORT, TERMINAL, Derived, declared, shown
from amp_suite.analysis.quantities import Ratio
from amp_suite.analysis.summary import SummaryRow, summarize

# A quantity no surface knows of: the mean step time, in words of its own.
STEP = Derived("step_time_ms", "mean step (declared)", "figure", "ms", EVERYWHERE,
               words=lambda row: "-" if row.step_time_ms is None else f"{row.step_time_ms:.3f} ms/step")  # fmt: skip


def test_a_quantity_declared_once_appears_on_every_surface(monkeypatch):
    made = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1900.0)})
    before = surfaces(made, width=400)
    assert not any("mean step (declared)" in shown or "'step_time_ms'" in shown for shown in before.values())
    monkeypatch.setattr(derived, "DERIVED", (*DERIVED, STEP))
    after = surfaces(made, width=400)
    step = f"{summarize(made)[0].step_time_ms:.3f} ms/step"
    for surface in ("terminal", "markdown", "html"):
        assert "mean step (declared)" in after[surface] and step in after[surface], surface
    assert "'step_time_ms': " in after["mlflow diagnostics"]


def test_a_quantity_is_shown_only_where_it_is_declared_to_be(monkeypatch):
    made = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1900.0)})
    monkeypatch.setattr(derived, "DERIVED", (*DERIVED, Derived(**{**STEP.__dict__, "surfaces": frozenset({REPORT})})))
    found = surfaces(made, width=400)
    assert "mean step (declared)" in found["markdown"] and "mean step (declared)" not in found["terminal"]
    assert "'step_time_ms'" not in found["mlflow diagnostics"]


def test_the_ratios_are_ratios_with_their_seeds_and_interval():
    made = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1900.0)},
                   memory={"fp32": 1000.0, "bf16": 600.0})  # fmt: skip
    bf16 = next(row for row in summarize(made) if row.precision == "bf16")
    assert isinstance(bf16.memory_ratio, Ratio) and bf16.memory_ratio.seeds == 3
    assert bf16.memory_ratio.value == pytest.approx(0.6) and bf16.memory_ratio.baseline == "fp32"
    assert declared("memory_ratio").written(bf16) == "0.60x"  # the interval stays in report.json


@pytest.mark.parametrize("quantity", DERIVED, ids=lambda q: q.name)
def test_every_declaration_names_a_field_of_the_summary_row_and_a_surface(quantity):
    assert quantity.name in SummaryRow.__dataclass_fields__ and quantity.surfaces
    assert quantity in shown(next(iter(quantity.surfaces)), [], quantity.table) or quantity.only_where_measured


def test_mlflow_keeps_what_a_record_already_holds_out_of_the_summarys_diagnostics():
    """A figure the record holds itself (peak memory, energy) is logged from the record: the summary's
    mean over seeds under the same key would overwrite the cell's own."""
    assert not {q.name for q in DERIVED if MLFLOW in q.surfaces} & {"peak_memory_mb", "energy_j_per_sample"}
    assert TERMINAL in declared("memory_ratio").surfaces


def test_each_kind_is_written_its_own_way_where_no_words_are_declared():
    row = SimpleNamespace(scaling_efficiency=Ratio(0.874, "world size 1 x 2"), hook_step_ratio=Ratio(0.83, "plain"),
                          comm_share=0.31)  # fmt: skip
    assert declared("scaling_efficiency").written(row) == "87%"  # a share, though a Ratio
    assert declared("hook_step_ratio").written(row) == "0.83x"
    assert declared("comm_share").written(row) == "31%"
    assert declared("comm_share").written(SimpleNamespace(comm_share=None)) == "-"
