"""make test's coverage figure: the line coverage of amp_suite/ over every process the suite ran (the
pytest workers, and through coverage's `patch = subprocess` each amp-suite command, cell and DDP
rank they started), the modules below LOW, and a floor that fails the run.

Run after `coverage combine`. The floor is pyproject.toml's `[tool.coverage.report] fail_under`,
set a little below the measured figure: a change that leaves new code untested, or stops a test
from reaching the code it meant to, shows as a drop, and a large one fails `make test`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import coverage

LOW = 60.0  # a module below this is listed, with its figure: cover it, or say why it need not be


def main() -> int:
    measured = coverage.Coverage()
    measured.load()
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "coverage.json"
        measured.json_report(outfile=str(report))
        data = json.loads(report.read_text())
    total = data["totals"]["percent_covered"]
    floor = float(measured.get_option("report:fail_under") or 0)
    low = sorted(
        (summary["summary"]["percent_covered"], name)
        for name, summary in data["files"].items()
        if summary["summary"]["percent_covered"] < LOW
    )
    lines, covered = data["totals"]["num_statements"], data["totals"]["covered_lines"]
    print(f"line coverage of amp_suite/: {total:.1f}% ({covered:,} of {lines:,} lines, every process counted)")
    for percent, name in low:
        print(f"  below {LOW:.0f}%: {name} {percent:.0f}%")
    if total < floor:
        print(f"coverage {total:.1f}% is below the floor of {floor:.0f}% (pyproject.toml, fail_under)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
