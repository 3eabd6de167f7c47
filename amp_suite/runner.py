"""Run a matrix: one isolated process per cell, resume, results.jsonl, MLflow mirror, summary."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from amp_suite.config import CellSpec, Matrix
from amp_suite.results import CellRecord, ResultsFile
from amp_suite.summary import SummaryRow, summarize
from amp_suite.tracking import MlflowTracker
from amp_suite.worker import cell_context, run_isolated
from amp_suite.workloads import WORKLOAD_MODULES

RESULTS_FILE = "results.jsonl"


class Display(Protocol):
    def begin(self, to_run: int, reused: int) -> None: ...
    def warn(self, message: str) -> None: ...
    def start_cell(self, spec: CellSpec) -> None: ...
    def cell_progress(self, phase: str, done: int, total: int) -> None: ...
    def finish_cell(self, record: CellRecord) -> None: ...


class MatrixRunner:
    def __init__(
        self,
        matrix: Matrix,
        cells: Sequence[CellSpec],
        out_dir: Path,
        tracker: MlflowTracker,
        display: Display,
        resume: bool = False,
        environment: dict[str, object] | None = None,
    ) -> None:
        """`environment`: facts the cell can't see itself (the container image); they fill gaps only."""
        self.matrix = matrix
        self.cells = list(cells)
        self.out_dir = out_dir
        self.results = ResultsFile(out_dir / RESULTS_FILE)
        self.tracker = tracker
        self.display = display
        self.resume = resume
        self.environment = environment or {}

    def plan(self) -> tuple[list[CellSpec], list[CellRecord]]:
        """(cells to run, records reused from an earlier run of the same cells with --resume)."""
        previous, unreadable = self.results.read()
        if unreadable:
            self.display.warn(f"{unreadable} unreadable line(s) in {self.results.path} were ignored")
        if not self.resume:
            return self.cells, []
        done = {record.resume_key: record for record in previous if record.status == "ok"}
        keys = [(spec.cell_id, spec.config_hash) for spec in self.cells]
        todo = [spec for spec, key in zip(self.cells, keys, strict=True) if key not in done]
        return todo, [done[key] for key in keys if key in done]

    def run(self, experiment: str, matrix_text: str) -> tuple[list[CellRecord], list[SummaryRow]]:
        todo, records = self.plan()
        self.display.begin(len(todo), len(records))
        self.tracker.start(self.matrix, experiment, matrix_text)
        context = cell_context(sorted({WORKLOAD_MODULES[spec.workload.workload] for spec in todo}))
        run_id = None
        try:
            for spec in todo:
                self.display.start_cell(spec)
                run_id = self.tracker.start_cell(spec)
                record = run_isolated(context, spec, self._log_path(spec), self.display.cell_progress)
                record = self._complete(record, run_id)
                self.results.append(record)  # the record of truth first, then the mirror
                self.tracker.finish_cell(run_id, record)
                run_id = None
                self.display.finish_cell(record)
                records.append(record)
        except BaseException:
            self.tracker.abort(run_id)
            raise
        summary = summarize(records, self.matrix.parity)
        self.tracker.finish([row.as_dict() for row in summary])
        return records, summary

    def _complete(self, record: CellRecord, run_id: str | None) -> CellRecord:
        """Add what the cell could not know: its MLflow run, and deployment facts (filling gaps only)."""
        known = {key: value for key, value in record.environment.items() if value is not None}
        return record.model_copy(update={"mlflow_run_id": run_id, "environment": {**self.environment, **known}})

    def _log_path(self, spec: CellSpec) -> Path:
        return self.out_dir / "logs" / (spec.cell_id.replace("/", "_") + ".log")
