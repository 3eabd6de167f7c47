"""The Tracker a run uses to mirror its records into MLflow as it goes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from amp_suite.analysis.conclusion import Conclusion
from amp_suite.analysis.outcome import ExitCode, Outcome
from amp_suite.config import CellSpec, Matrix
from amp_suite.records.invocations import Invocation, InvocationStarted
from amp_suite.records.results import CellRecord
from amp_suite.tracking.mlflow_store import MLFLOW_NOTE, Held, MlflowStore
from amp_suite.tracking.relocate import ARTIFACTS
from amp_suite.tracking.system_metrics import SystemMetrics


def open_mlflow_tracker(uri: str, run_folder: Path | None) -> MlflowTracker:
    """MLflow's store at `uri`. A run folder's own store keeps its artifacts in the folder where it
    is now (pinned as it opens): copied, moved or edited, it would point at another place."""
    if run_folder is None:
        return MlflowTracker(MlflowStore(uri))
    return MlflowTracker(MlflowStore(uri, run_folder / ARTIFACTS))


class MlflowTracker:
    def __init__(self, store: MlflowStore) -> None:
        self.store = store
        self.invocation: InvocationStarted | None = None
        self.experiment_id: str | None = None
        self.parent_id: str | None = None
        self.open_cells: set[str] = set()  # cells started and not finished: several run at once side by side
        self.logged: list[CellRecord] = []  # this invocation's records, for their verdicts at the end
        self.system: SystemMetrics | None = None

    def start(self, invocation: InvocationStarted, matrix: Matrix) -> None:
        self.invocation = invocation
        self.experiment_id = self.store.experiment_id(invocation.experiment)
        self.parent_id = self.store.create_invocation_run(self.experiment_id, invocation)
        self.system = SystemMetrics(self.parent_id, self.store.uri)

    def close_orphans(self, invocations: Sequence[Invocation]) -> None:
        for invocation in invocations:
            experiment_id = self.store.experiment_id(invocation.started.experiment, create=False)
            if experiment_id is None:
                continue
            for run in self.store.runs_of(experiment_id, invocation.invocation_id, running_only=True):
                self.store.close(run.info.run_id, "KILLED", f"amp-suite: {invocation.killed_note()}")

    def start_cell(self, spec: CellSpec, record_id: str) -> str | None:
        assert self.invocation is not None and self.experiment_id is not None, "start() first"
        run_id = self.store.create_child(
            self.experiment_id, self.parent_id, self.invocation.invocation_id, record_id, spec.cell_id
        )
        self.open_cells.add(run_id)
        return run_id

    def finish_cell(self, record: CellRecord) -> None:
        run_id = record.tracker_run_id
        if run_id is None:
            return
        self.store.log_record(run_id, record, Path(record.log_path) if record.log_path else None)
        self.store.finish_record(run_id, record)
        self.open_cells.discard(run_id)
        if not any(r.machine for r in self.logged) and record.machine and self.parent_id and self.invocation:
            self.store.describe_parent(self.parent_id, record, self.invocation.matrix, self.invocation.at)
        self.logged.append(record)

    def finish(self, conclusion: Conclusion, outcome: Outcome, report: Path | None) -> None:
        assert self.invocation is not None and self.parent_id is not None, "start() first"
        self._stop_system_metrics()
        runs = [(record, record.tracker_run_id) for record in self.logged if record.tracker_run_id]
        # Cells that failed are the matrix's findings; a report that could not be written is the run's failure.
        status = "FAILED" if outcome.exit_code == ExitCode.WRITE_FAILED else "FINISHED"
        ending = (status, {"outcome": outcome.label, "exit_code": int(outcome.exit_code)})
        self.store.conclude(self.parent_id, conclusion, Held(self.logged, runs, self.invocation.at), report, ending)

    def abort(self, ending: str, why: str) -> None:
        self._stop_system_metrics()
        for run_id in sorted(self.open_cells):
            self.store.close(run_id, "KILLED", why)
        if self.parent_id is not None:
            # The description the UI opens on: no answer was written, and this says why and what next.
            note = (
                f"No answer: {why}, after {len(self.logged)} cell(s) finished. `amp-suite run --resume` finishes"
                " the matrix in a run of its own; `amp-suite summary` answers for the cells that finished."
            )
            self.store.close(self.parent_id, "KILLED", why, {"outcome": ending, MLFLOW_NOTE: note})
        self.open_cells.clear()

    def _stop_system_metrics(self) -> None:
        if self.system is not None:
            self.system.stop()
            self.system = None
