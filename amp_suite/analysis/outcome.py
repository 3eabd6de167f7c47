"""What a finished matrix says, as an exit code a script can trust. No torch here.

A cell is expected to end ok (or skipped, with its reason) and an AMP mode to keep parity,
unless the matrix declares otherwise in `expect:` (a negative control that must fail parity,
a cell that must diverge). The exit code is 0 only when every cell and verdict is as expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from amp_suite.analysis.quantities import FAIL, INVALID, NOT_JUDGED
from amp_suite.analysis.summary import BASELINE, SummaryRow
from amp_suite.analysis.words import PARITY_WORDS
from amp_suite.config import Expectation
from amp_suite.config.base import OK, SKIPPED
from amp_suite.records.results import CellRecord


class ExitCode(IntEnum):
    OK = 0  # every cell ok or skipped with a reason, every verdict as expected
    INTERNAL_ERROR = 1  # a bug: the traceback says where
    BAD_INPUT = 2  # nothing ran: bad input, unusable path or tracker, folder busy, no GPU where required
    CELLS_FAILED = 3  # a cell failed or diverged that the matrix did not expect to
    UNEXPECTED_VERDICT = 4  # a parity verdict (or an expected outcome) other than the expected one
    WRITE_FAILED = 5  # a record (stopped early) or the report could not be written; sync: the store failed
    # 128 + N: stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)


@dataclass(frozen=True)
class Outcome:
    exit_code: ExitCode
    problems: tuple[str, ...]  # why the exit code is not 0
    as_expected: tuple[str, ...]  # declared expectations that held

    @property
    def label(self) -> str:
        return {0: "as expected", 3: "cells failed", 4: "unexpected verdicts", 5: "not written"}[int(self.exit_code)]

    def unwritten(self, problem: str) -> Outcome:
        """This outcome, with something that should have been written and was not: exit 5."""
        return Outcome(ExitCode.WRITE_FAILED, (*self.problems, problem), self.as_expected)


def judge(records: Sequence[CellRecord], summary: Sequence[SummaryRow], expect: Sequence[Expectation]) -> Outcome:
    failed, unexpected, held = [], [], []
    for record in records:
        wanted = _declared(expect, record.workload, record.precision, "status")
        if wanted is not None:
            (held if record.status == wanted else unexpected).append(
                f"{record.cell_id}: status {record.status} (expected {wanted})"
            )
        elif record.status not in (OK, SKIPPED):
            failed.append(f"{record.cell_id}: {record.status}: {record.reason or 'no reason recorded'}")
    for row in summary:
        if row.precision == BASELINE or _covered(expect, row.workload, row.precision, "status"):
            continue
        verdict = row.parity.verdict if row.parity else None
        wanted = _declared(expect, row.workload, row.precision, "parity")
        where = f"{row.workload}/bs{row.batch_size}/{row.precision}"
        if wanted is not None:
            (held if verdict == wanted else unexpected).append(
                f"{where}: parity {_called(verdict)} (expected {_called(wanted)})"
            )
        elif verdict == FAIL:
            p = row.parity
            unexpected.append(f"{where}: parity {_called(FAIL)} ({p.delta:+.4g} against a margin of {p.tolerance:.4g})")
        elif verdict == INVALID:  # never pooled: a comparison of other data is no verdict at all
            unexpected.append(f"{where}: parity {_called(INVALID)} ({row.parity.invalid and row.parity.invalid.words})")
    code = ExitCode.CELLS_FAILED if failed else ExitCode.UNEXPECTED_VERDICT if unexpected else ExitCode.OK
    return Outcome(code, tuple(failed + unexpected), tuple(held))


def _called(verdict: str | None) -> str:
    """A verdict as people read it (analysis.words); no parity at all reads as not judged."""
    return PARITY_WORDS.get(verdict or NOT_JUDGED, str(verdict))


def _declared(expect: Sequence[Expectation], workload: str, precision: str, field: str) -> str | None:
    matches = [e for e in expect if e.covers(workload, precision) and getattr(e, field) is not None]
    matches.sort(key=lambda e: e.workload is not None)  # one that names the workload wins
    return getattr(matches[-1], field) if matches else None


def _covered(expect: Sequence[Expectation], workload: str, precision: str, field: str) -> bool:
    """A cell expected to end other than ok has no parity to keep (a diverged run fails it)."""
    wanted = _declared(expect, workload, precision, field)
    return wanted is not None and wanted != OK
