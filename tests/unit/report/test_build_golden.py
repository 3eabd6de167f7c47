"""report.json's shape and every verdict in it, on stored records: what a refactoring must not change.

The records are a real smoke run's (tests/fixtures/results-2026-12-01.jsonl, amp-suite 0.1.0 at
81a76bb). The golden file holds every key path of the report and every verdict and sentence, not
the figures: a change that moves a key or flips a verdict fails here, and must say so by updating
the golden file (`PYTHONPATH=tests python tests/unit/report/test_build_golden.py` writes it anew).
"""

from __future__ import annotations

import json
import sys

from conftest import REPO

from amp_suite.records.results import ResultsFile
from amp_suite.report import build_report

RECORDS = REPO / "tests" / "fixtures" / "results-2026-12-01.jsonl"
GOLDEN = REPO / "tests" / "fixtures" / "report-2026-12-01.golden.json"


def key_paths(value: object, prefix: str = "") -> set[str]:
    """Every key of a JSON document, as a path: "rows[].parity.verdict"."""
    if isinstance(value, dict):
        return {p for key, inner in value.items() for p in {f"{prefix}.{key}"} | key_paths(inner, f"{prefix}.{key}")}
    if isinstance(value, list):
        return {p for inner in value for p in key_paths(inner, f"{prefix}[]")}
    return set()


def shape_and_verdicts() -> dict:
    records, unreadable = ResultsFile(RECORDS).read()
    report = json.loads(build_report(records, [], sources=["stored"], unreadable=unreadable).model_dump_json())
    return {
        "keys": sorted(key_paths(report)),
        "answers": [[a["workload"], a["variant"], a["verdict"], a["mode"], a["accuracy"], a["sentence"]]
                    for a in report["answer"]],  # fmt: skip
        "rows": [[r["workload"], r["variant"], r["precision"], r["status"], r["parity"] and r["parity"]["verdict"]]
                 for r in report["rows"]],  # fmt: skip
        "claims": [[c["claim"], c["verdict"], c["evidence"]] for c in report["claims"]],
        "notes": report["notes"],
    }


def test_the_report_of_stored_records_keeps_its_keys_and_verdicts():
    assert shape_and_verdicts() == json.loads(GOLDEN.read_text())


def test_the_golden_comparison_can_fail():
    golden = json.loads(GOLDEN.read_text())
    flipped = {**golden, "answers": [[*a[:2], "recommended", *a[3:]] for a in golden["answers"]]}
    assert shape_and_verdicts() != flipped and golden["answers"] and golden["claims"]


if __name__ == "__main__":  # writes the golden file anew, after a change that means to alter it
    GOLDEN.write_text(json.dumps(shape_and_verdicts(), indent=1) + "\n")
    sys.exit(0)
