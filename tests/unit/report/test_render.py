"""What people read (amp_suite.report.render): tables that fit a screen and say each figure once,
columns that describe the mode beside them, one unit per workload, and text that reads as itself in
report.md and report.html. FIXTURE records (tests/support/fixture_records.py), not measurements."""

from __future__ import annotations

import re

from support.fixture_records import A100, MLP, records, three

from amp_suite.report import build_report
from amp_suite.report.render import sections, to_html, to_markdown
from amp_suite.text import markdown_cell

EVERY_MODE = ("fp32", "tf32", "fp16", "bf16", "fp8-tensorwise", "fp8-rowwise")
TRANSFORMER = {"workload": "transformer", "n_layer": 1, "n_embd": 32, "n_head": 2, "seq_len": 33, "vocab_size": 512,
               "batch_sizes": [8], "samples": 64}  # fmt: skip
WIDTH = 160  # characters of a row's cells: about 1,600 px at the report's 13 px table font


def every_mode_report(throughput: float = 1000.0):
    made = records(A100, MLP, {mode: three(throughput * (1 + i / 10)) for i, mode in enumerate(EVERY_MODE)})
    made += records(A100, TRANSFORMER, {mode: three(40.0 * (1 + i / 10)) for i, mode in enumerate(EVERY_MODE)})
    return build_report(made, [])


def test_each_glance_table_fits_a_screen_with_every_mode_and_says_one_topic():
    glance = {s.title.split(" on ")[0]: s for s in sections(every_mode_report()) if s.title.startswith(
        ("Speed on", "Memory on", "Accuracy on"))}  # fmt: skip
    assert list(glance) == ["Speed", "Memory", "Accuracy"]
    for section in glance.values():
        assert section.headers == ["workload", "batch", *EVERY_MODE]
        for row in section.rows:
            assert len(" | ".join(row)) <= WIDTH, row
    mlp = glance["Speed"].rows[0]
    assert mlp[0] == "mlp (samples/s)" and "(n=3)" in mlp[2] and mlp[3].startswith("1.10x [")  # fp32 its rate
    assert glance["Accuracy"].rows[0][3].startswith("0.9, pass (p")


def test_the_accuracy_beside_fp32_says_nothing_of_the_mode_that_lost_it():
    """fp32 to train in because bf16 loses accuracy: the column beside "fp32" must not read "at risk"."""
    lossy = [(2000.0 * f, 0.5 + d) for f, d in ((0.99, -0.01), (1.0, 0.0), (1.01, 0.01))]
    report = build_report(records(A100, MLP, {"fp32": three(1000.0), "bf16": lossy}), [])
    (answer,) = [s for s in sections(report) if s.title == "The answer"]
    (row,) = answer.rows
    assert row[4:6] == ["fp32", "-"] and "bf16" in row[6] and "loses accuracy" in row[6]


def test_every_cell_gives_throughput_in_its_workloads_unit_without_scientific_notation():
    report = every_mode_report(throughput=42_090.0)
    by_topic = {s.title: s for s in sections(report) if s.title.startswith("Every cell")}
    topics = ("speed", "timing", "memory", "accuracy")
    assert list(by_topic) == [f"Every cell's {topic} measurements" for topic in topics]
    cells = by_topic["Every cell's speed measurements"]
    assert cells.headers[:2] == ["cell", "status"]  # one machine: no machine column
    throughput = cells.headers.index("throughput")
    units = {row[0].split("/")[0]: row[throughput].split(" ", 1)[1] for row in cells.rows}
    assert units == {"mlp": "samples/s", "transformer": "tokens/s"}  # as the results tables give them
    assert "42,090" in " ".join(row[throughput] for row in cells.rows)
    for section in by_topic.values():
        assert not any(re.search(r"\de[+-]\d", cell) for row in section.rows for cell in row)
        assert all(len(" | ".join(row)) <= WIDTH for row in section.rows), section.title


def test_comparisons_read_as_themselves_in_markdown_and_code_is_code_in_html():
    report = build_report(records(A100, MLP, {"fp32": [(1000.0, 0.9)], "bf16": [(1500.0, 0.9)]}), [])
    markdown, html = to_markdown(report, []), to_html(report, [])
    assert "&gt;" not in markdown and "&lt;" not in markdown
    assert markdown_cell("cc >= 8.0") == "cc >= 8.0" and markdown_cell("<b>|&amp;") == "\\<b>\\|\\&amp;"
    assert "`repeats: 3`" in markdown and "<code>repeats: 3</code>" in html and "`" not in html
    assert "Mixed Precision in PyTorch: What autocast Changes and When It Pays Off" in markdown
