"""`amp-suite sync`: replay run folders into an MLflow store, idempotently.

The way to catch up after a tracker outage, and to gather the run folders of several boxes into
one team server. Runs are matched by the invocation and record ids they are tagged with: a
complete run is left alone, a half-logged one is logged again (identical metrics are not
duplicated) and completed, a missing one is created. Runs that a stopped or killed invocation
left RUNNING are closed as KILLED. A second sync adds nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from amp_suite.analysis.conclusion import Conclusion
from amp_suite.analysis.outcome import judge
from amp_suite.config import Matrix
from amp_suite.config.base import SKIPPED
from amp_suite.files import read_limited
from amp_suite.records.invocations import Invocation
from amp_suite.records.results import CellRecord, DistinctRecords
from amp_suite.records.rundir import RunDirectory, is_plain_file
from amp_suite.tracking.mlflow_store import (
    PARENT,
    TAG_COMPLETE,
    TAG_ENDED_BY,
    TAG_RECORD,
    Held,
    MlflowStore,
)

MAX_REPORT = 64 << 20  # report.json lists each record once: far below this


@dataclass
class SyncReport:
    records: int = 0
    added: int = 0  # cell runs created
    completed: int = 0  # half-logged cell runs logged again and completed
    present: int = 0  # complete already
    skipped: int = 0  # skipped cells: their runs set aside (out of the runs table), as a run's are
    parents: int = 0  # parent runs created or completed
    closed: int = 0  # runs left RUNNING by an invocation that did not finish, now KILLED
    unreadable: int = 0  # lines of results.jsonl or invocations.jsonl that could not be read
    repeated: int = 0  # lines that repeat an earlier record exactly: counted once
    conflicting: int = 0  # lines that reuse an earlier record's id with other content: the first is kept

    @property
    def wrote_anything(self) -> bool:
        return bool(self.added or self.skipped or self.completed or self.parents or self.closed)

    def describe(self) -> str:
        return (
            f"{self.records} records: {self.added} added, {self.completed} completed, {self.present} already there,"
            f" {self.skipped} skipped (set aside, listed on the parent);"
            f" {self.parents} parent run(s) written, {self.closed} run(s) left open closed as KILLED"
        )

    def problems(self) -> list[str]:
        """What the folder held that sync did not upload as it was, one line each."""
        lines = []
        if self.unreadable:
            lines.append(f"{self.unreadable} unreadable line(s) skipped")
        if self.repeated:
            lines.append(f"{self.repeated} repeated record(s) counted once")
        if self.conflicting:
            lines.append(
                f"{self.conflicting} record(s) reuse an earlier record's record_id with other content:"
                " the first was synced, the later ones were not"
            )
        return lines


def sync_run_dir(directory: RunDirectory, store: MlflowStore, report: SyncReport) -> None:
    """Fills `report` as it goes, so a caller whose store failed part-way knows what was written."""
    lines, unreadable_records = directory.results.read()
    read_invocations, unreadable_invocations = directory.invocations.read()
    report.unreadable = unreadable_records + unreadable_invocations
    distinct = DistinctRecords()
    distinct.add(lines)
    records, report.repeated, report.conflicting = distinct.records, distinct.repeated, distinct.conflicting
    invocations = {invocation.invocation_id: invocation for invocation in read_invocations}
    groups: dict[str, list[CellRecord]] = {}
    for record in records:
        groups.setdefault(record.invocation_id or f"legacy-{record.matrix}", []).append(record)
    # Invocations stopped before their first record may still have left a run open.
    groups.update({key: [] for key, inv in invocations.items() if key not in groups and not inv.finished})
    report.records = len(records)
    by_identity = {record.identity: record for record in records}
    for key, group in groups.items():
        invocation = invocations.get(key)
        # A resumed run's summary also counted the records it reused from earlier runs.
        reused = [by_identity[r] for r in (invocation.started.reused if invocation else []) if r in by_identity]
        _InvocationSync(store, directory, report, key, invocation, group, reused).run()


class _InvocationSync:
    """Brings one invocation's runs in the store in line with its records."""

    def __init__(
        self, store: MlflowStore, directory: RunDirectory, report: SyncReport, key: str,
        invocation: Invocation | None, records: list[CellRecord], reused: list[CellRecord],
    ) -> None:  # fmt: skip
        self.store, self.directory, self.report = store, directory, report
        self.key, self.invocation, self.records, self.reused = key, invocation, records, reused
        self.written: set[str] = set()  # run ids completed by this sync
        self.run_ids: dict[str, str] = {}  # record identity -> its run in the store

    def run(self) -> None:
        experiment = self.invocation.started.experiment if self.invocation else self.records[0].matrix
        experiment_id = self.store.experiment_id(experiment, create=bool(self.records))
        if experiment_id is None:
            return
        existing = self.store.runs_of(experiment_id, self.key)
        if self.records:
            parent = _chosen(run for run in existing if PARENT not in run.data.tags).get(None)
            children = _chosen(run for run in existing if PARENT in run.data.tags)
            parent_id = parent.info.run_id if parent else self._create_parent(experiment_id)
            for record in self.records:
                self._sync_record(experiment_id, parent_id, record, children.get(record.identity))
            # A parent tagged complete but RUNNING had its last call cut between the tag and its status.
            if parent is None or parent.data.tags.get(TAG_COMPLETE) != "true" or parent.info.status == "RUNNING":
                self._complete_parent(parent_id)
        for run in existing:  # e.g. the cell that was running when the invocation was killed
            if run.info.status == "RUNNING" and run.info.run_id not in self.written:
                self.store.close(run.info.run_id, "KILLED", self._why())
                self.report.closed += 1

    def _sync_record(self, experiment_id: str, parent_id: str, record: CellRecord, run) -> None:
        if run is not None:
            self.run_ids[record.identity] = run.info.run_id
        if run is not None and run.data.tags.get(TAG_COMPLETE) == "true":
            self.report.present += 1
            if run.info.status == "RUNNING":  # its last call was cut between the complete tag and its status
                self.store.finish_record(run.info.run_id, record)
                self.written.add(run.info.run_id)
            return
        if run is None:  # a skipped cell's too: set aside as the run sets it aside, its reason kept for reports
            run_id = self.store.create_child(experiment_id, parent_id, self.key, record.identity, record.cell_id)
            if record.status == SKIPPED:
                self.report.skipped += 1
            else:
                self.report.added += 1
        else:
            run_id = run.info.run_id
            self.report.completed += 1
        self.store.log_record(run_id, record, self.directory.cell_log(record.cell_id))
        self.store.finish_record(run_id, record)
        self.written.add(run_id)
        self.run_ids[record.identity] = run_id

    def _create_parent(self, experiment_id: str) -> str:
        if self.invocation is None:  # records written before invocations.jsonl existed
            return self.store.create_parent(experiment_id, self.key, f"{self.records[0].matrix}-synced", {})
        return self.store.create_invocation_run(experiment_id, self.invocation.started)

    def _complete_parent(self, parent_id: str) -> None:
        matrix = _matrix(self.invocation)
        everything = self.reused + self.records
        conclusion = Conclusion.of(everything, matrix.parity if matrix else None)  # the matrix's rule: for old records
        stamp = self.invocation.started.at if self.invocation else self.records[0].started_at
        described = next((record for record in self.records if record.machine), None)
        if described is not None:
            self.store.describe_parent(parent_id, described, described.matrix, stamp)
        runs = [(record, self.run_ids[record.identity]) for record in self.records if record.identity in self.run_ids]
        report = self.directory.path / "report"
        ours = report if self.key in _report_invocations(report) else None  # a report of other invocations: not logged
        ending = self._ending(conclusion, matrix)
        self.store.conclude(parent_id, conclusion, Held(everything, runs, stamp), ours, ending)
        self.written.add(parent_id)
        self.report.parents += 1

    def _ending(self, conclusion: Conclusion, matrix: Matrix | None) -> tuple[str, dict]:
        """The parent's status and the tags that say how its invocation ended: judged, if it finished;
        if it did not get to judge its matrix, how it ended instead."""
        if self.invocation is None or self.invocation.finished:
            outcome = judge(list(conclusion.records), conclusion.rows, matrix.expect if matrix else ())
            return "FINISHED", {"outcome": outcome.label, "exit_code": int(outcome.exit_code)}
        ending = self.invocation.ended.outcome if self.invocation.ended else "killed"
        return "KILLED", {"outcome": ending, TAG_ENDED_BY: self._why()}

    def _why(self) -> str:
        if self.invocation is None:
            return "amp-suite: the run did not finish"
        ended = self.invocation.ended
        if ended is None:
            return f"amp-suite: {self.invocation.killed_note()}"
        return ended.detail or f"amp-suite: the run ended {ended.outcome}"


def _chosen(runs) -> dict:
    """One run per record id (None for a parent), the same whichever sync asks: where two syncs
    into a server raced and both created one, the complete one, then the oldest, then the lowest
    id. The others are left as they are, and no sync adds a third."""
    chosen: dict = {}
    for run in sorted(runs, key=_preference):
        chosen.setdefault(run.data.tags.get(TAG_RECORD), run)
    return chosen


def _preference(run) -> tuple:
    return run.data.tags.get(TAG_COMPLETE) != "true", run.info.start_time or 0, run.info.run_id


def _matrix(invocation: Invocation | None) -> Matrix | None:
    """The invocation's matrix (its parity rule and expectations), if this version can read it."""
    if invocation is None:
        return None
    try:
        return Matrix.model_validate(invocation.started.matrix_config)
    except ValidationError:
        return None


def _report_invocations(folder: Path) -> list[str]:
    """The invocations a folder's report covers (none if it has no readable report)."""
    try:  # a plain file of bounded size: a link to /dev/zero would be read forever
        text = read_limited(folder / "report.json", MAX_REPORT) if is_plain_file(folder / "report.json") else None
        return json.loads(text or b"{}").get("invocations", [])
    except (OSError, ValueError, AttributeError):  # ConfigError is a ValueError
        return []
