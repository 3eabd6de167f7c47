"""What a set of records concludes, worked out once: each comparison's summary row, each answer, and
the machines they ran on. `amp-suite run` builds it when its matrix ends and hands it to the
terminal, the tracker and the report; `amp-suite report` and `sync` build it from records alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amp_suite.analysis.answer import Answer, answers
from amp_suite.analysis.summary import SummaryRow, summarize
from amp_suite.config import ParityConfig
from amp_suite.records.machine import Machine
from amp_suite.records.results import CellRecord


@dataclass(frozen=True)
class Conclusion:
    records: tuple[CellRecord, ...]
    rows: list[SummaryRow]  # one per comparison and precision (analysis.summary)
    answers: list[Answer]  # one per machine and comparison (analysis.answer)
    machines: dict[str, Machine]  # by key: each machine a record names

    @classmethod
    def of(cls, records: Sequence[CellRecord], default_rule: ParityConfig | None = None) -> Conclusion:
        """`default_rule`: the parity rule for records written before they carried their own."""
        rows = summarize(records, default_rule)
        machines: dict[str, Machine] = {}
        for record in records:  # the first record's description of its machine
            if record.machine is not None:
                machines.setdefault(record.machine.key, record.machine)
        return cls(tuple(records), rows, answers(rows, machines), machines)

    def answers_on(self, machine: str) -> list[Answer]:
        """The answers of one machine (by key)."""
        return [answer for answer in self.answers if answer.machine == machine]

    @property
    def labels(self) -> dict[str, str]:
        """Each machine's label, by key, as the answer prints it."""
        return {key: machine.label for key, machine in self.machines.items()}
