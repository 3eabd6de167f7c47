"""The coverage figure of make test and make test-slow: the line coverage of amp_suite/ over every
process the suite ran (the pytest workers, and through coverage's `patch = subprocess` each
amp-suite command, cell and DDP rank they started), the modules below LOW, and a floor that fails
the run.

Run after `coverage combine`. The floor is `--floor`, or else pyproject.toml's `[tool.coverage.report]
fail_under` (the whole suite's: make test-slow adds its tests' data to make test's), each set a
little below its measured figure: a change that leaves new code untested, or stops a test from
reaching the code it meant to, shows as a drop, and a large one fails the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import coverage

LOW = 60.0  # a module below this is listed, with its figure: cover it, or say why it need not be


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--floor", type=float, help="fail below this percentage (default: pyproject's fail_under)")
    parser.add_argument("--suite", default="the suite", help='the name printed for what was counted: "the whole suite"')
    args = parser.parse_args()
    measured = coverage.Coverage()
    measured.load()
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "coverage.json"
        measured.json_report(outfile=str(report))
        data = json.loads(report.read_text())
    total = data["totals"]["percent_covered"]
    floor = args.floor if args.floor is not None else float(measured.get_option("report:fail_under") or 0)
    low = sorted(
        (summary["summary"]["percent_covered"], name)
        for name, summary in data["files"].items()
        if summary["summary"]["percent_covered"] < LOW
    )
    lines, covered = data["totals"]["num_statements"], data["totals"]["covered_lines"]
    figure = f"{total:.1f}% ({covered:,} of {lines:,} lines, every process counted)"
    print(f"line coverage of amp_suite/ by {args.suite}: {figure}", flush=True)
    for percent, name in low:
        print(f"  below {LOW:.0f}%: {name} {percent:.0f}%", flush=True)
    if total < floor:
        print(f"coverage {total:.1f}% of {args.suite} is below its floor of {floor:g}%", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
