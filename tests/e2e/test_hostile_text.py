"""Text from outside the program (paths, names, record strings) through the CLI: shown as text.

Rich markup (`[/]`), emoji shortcodes (`:x:`), terminal control characters (ESC, CR), Markdown
line breaks and pipes, and HTML reach the terminal and the reports inert: no MarkupError, no
cell left unrun, no injected heading or table cell, the JSON report keeps the original string.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import amp_suite, read_records, tiny_matrix

pytestmark = pytest.mark.slow

# Every kind of hostile text at once.
HOSTILE = "[/] [bold]b \x1b[31mred\x1b[0m \r cr \n# injected heading | pipe <script>alert(1)</script> :x: & end"
MACHINE = "Hostile CPU\n# injected machine [/] \x1b[31m | <script> :x:"
FOLDER = "out [/] [bold] :x: |"  # a run folder's name reaches the CLI's output lines
EMOJI = "\u274c"  # what rich makes of ":x:"


def assert_inert(done, code: int) -> None:
    """Exit code as intended, no crash, no control characters or emoji reached the terminal."""
    both = done.stdout + done.stderr
    assert done.returncode == code, both[-3000:]
    assert "Traceback" not in both and "MarkupError" not in both, both[-3000:]
    assert EMOJI not in both, both[-3000:]
    assert "\x1b" not in both and "\r" not in both, repr(both[-3000:])


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """A cell that fails with a reason quoting a hostile data.path, then a cell that must still run."""
    root = tmp_path_factory.mktemp("hostile")
    broken = {
        "workload": "transformer", "n_layer": 1, "n_embd": 16, "n_head": 2, "seq_len": 8, "vocab_size": 256,
        "batch_sizes": [4], "samples": 16, "data": {"source": "text", "path": "missing" + HOSTILE + ".txt"},
    }  # fmt: skip
    matrix = tiny_matrix(precisions=["fp32"])
    matrix["workloads"] = [broken, *matrix["workloads"]]
    (root / "m.yaml").write_text(yaml.safe_dump(matrix))
    out = root / FOLDER
    done = amp_suite("run", "--matrix", "m.yaml", "--out", str(out), "--device", "cpu", "--experiment", HOSTILE,
                     cwd=root)  # fmt: skip
    return root, out, done


def test_a_reason_quoting_markup_is_printed_and_the_matrix_goes_on(first_run):
    _, out, done = first_run
    assert_inert(done, 3)  # a cell failed (amp_suite.analysis.outcome.ExitCode.CELLS_FAILED)
    records = read_records(out)
    assert [(r["workload"], r["status"]) for r in records] == [("transformer", "failed"), ("mlp", "ok")]
    assert "missing[/] [bold]b" in records[0]["reason"]
    assert "missing[/] [bold]b" in done.stdout  # the reason, shown as written (finish line and summary note)
    assert ":x:" in done.stdout and FOLDER in done.stdout


@pytest.fixture(scope="module")
def resumed(first_run):
    """--resume reads back a hand-edited ok record whose reason and machine name are hostile."""
    root, out, _ = first_run
    lines = (out / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    ok = next(r for r in records if r["status"] == "ok")
    ok["reason"] = HOSTILE
    ok["machine"]["device_name"] = ok["device_name"] = MACHINE
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # Only the reused cell (the failed one would run again and fail as before).
    done = amp_suite("run", "--matrix", "m.yaml", "--out", str(out), "--device", "cpu", "--resume",
                     "--workloads", "mlp", cwd=root)  # fmt: skip
    return root, out, done


def test_resume_prints_hostile_record_strings_as_text(resumed):
    _, out, done = resumed
    assert_inert(done, 0)
    assert "--resume: 1 cell(s) already ok" in done.stdout and len(read_records(out)) == 2  # reused, not rerun
    assert "[/] [bold]b" in done.stdout and "Hostile CPU" in done.stdout  # note and table title, as text


@pytest.fixture(scope="module")
def reported(resumed):
    root, out, _ = resumed
    destination = root / "report"
    done = amp_suite("report", str(out), "--format", "md,html,json", "--out", str(destination), cwd=root)
    return destination, done


def test_report_cli_output_is_inert(reported):
    _, done = reported
    assert_inert(done, 0)
    assert "Hostile # injected machine [/]" in done.stdout  # the label: the model without "CPU", on one line


def test_cli_lines_carry_no_control_characters(reported, tmp_path):
    _, done = reported  # `amp-suite report` says the machines' labels (from the records) with say()
    refused = amp_suite("run", "--matrix", "m\x1b[31m.yaml", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert refused.returncode == 2 and "no such file" in refused.stderr, refused.stderr  # said with fail()
    for output in (done.stdout, refused.stderr):
        assert "\x1b" not in output and "\r" not in output, repr(output)


def test_markdown_report_keeps_hostile_text_in_its_cells(reported):
    destination, _ = reported
    markdown = (destination / "report.md").read_text()
    assert not re.search(r"(?<!\\)<", markdown) and "\x1b" not in markdown and "\r" not in markdown  # no tag
    assert "\\<script>" in markdown and "missing[/]" in markdown  # shown as itself, not dropped
    headings = [line for line in markdown.splitlines() if line.startswith("#")]
    assert headings[0] == "# amp-suite report" and all(h.startswith("## ") for h in headings[1:]), headings
    # Every row of a table has as many cells as its header: no pipe or line break split one.
    for table in re.findall(r"(?:^\|.*\n)+", markdown, flags=re.MULTILINE):
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in table.splitlines()}
        assert len(widths) == 1, table


def test_html_and_json_reports_keep_the_original_strings(reported):
    destination, _ = reported
    html = (destination / "report.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    report = json.loads((destination / "report.json").read_text())
    assert HOSTILE in [row["reason"] for row in report["rows"]]
    assert any(machine["device_name"] == MACHINE for machine in report["machines"])


def test_sync_prints_its_line_as_text(resumed, tmp_path):
    _, out, _ = resumed
    done = amp_suite("sync", str(out), "--tracking-uri", f"sqlite:///{tmp_path / 'team.db'}", cwd=tmp_path)
    assert_inert(done, 0)
    assert f"{FOLDER} -> " in done.stdout and "2 records" in done.stdout
