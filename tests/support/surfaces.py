"""What users read of a set of records, surface by surface: the terminal's summary table, the
report's Markdown and HTML, each cell's MLflow run (its description and its diagnostics.json), and
the answer. For tests that change a source of words or quantities and see every surface follow."""

from __future__ import annotations

from rich.console import Console

from amp_suite.analysis.summary import summarize
from amp_suite.cli.display import print_summary
from amp_suite.report import build_report
from amp_suite.report.render import to_html, to_markdown
from amp_suite.tracking.cell_view import verdict_diagnostics, verdict_line


def surfaces(made: list, width: int = 250) -> dict[str, str]:
    report = build_report(made, [])
    console = Console(record=True, width=width)
    print_summary(console, summarize(made), "fixture", None)
    rows = {row.precision: row for row in report.rows}
    return {
        "terminal": console.export_text(),
        "markdown": to_markdown(report, []),
        "html": to_html(report, []),
        "mlflow": "\n".join(verdict_line(record, rows[record.precision]) for record in made),
        "mlflow diagnostics": str([verdict_diagnostics(record, rows[record.precision]) for record in made]),
        "answer": " ".join(answer.sentence for answer in report.answer),
    }
