"""Run a matrix: one isolated process per cell, resume, results.jsonl, the tracker mirror, summary.

The caller holds the run directory's lock, so any invocation still open in invocations.jsonl
belongs to a process that is gone: the runner records it as killed and has the tracker close
the runs it left open. Records go to results.jsonl first, then to the tracker.

On this box, the precisions of one comparison run side by side, taking turns on the device window
by window (amp_suite.execution.side_by_side), and comparisons one after another; with `--gpus` or
a Ray fleet (`--ray`) cells run concurrently through the scheduler, one after another on each
device. Either way every record, tracker call and line on the terminal comes from this thread.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from amp_suite.analysis.conclusion import Conclusion
from amp_suite.analysis.outcome import Outcome, judge
from amp_suite.config import AUTO_BATCH, CellSpec, Matrix
from amp_suite.config.base import FAILED, INTERRUPTED, OK, OOM, SKIPPED, window_edges
from amp_suite.execution import batch_search
from amp_suite.execution.batch_search import search_batch
from amp_suite.execution.executors import Executor, OnThisBox, Progress, RunOne
from amp_suite.execution.scheduler import Scheduler
from amp_suite.execution.side_by_side import SideBySide, comparisons, why_alone
from amp_suite.execution.watchdog import Watch
from amp_suite.records.finish import finished
from amp_suite.records.invocations import SIGNALLED, Ending, InvocationStarted, new_id
from amp_suite.records.jsonl import LineWriteError
from amp_suite.records.results import BatchSearch, CellRecord, describe_error
from amp_suite.records.rundir import RunDirectory
from amp_suite.signals import signal_of
from amp_suite.tracking import Tracker

Reporter = Callable[[Conclusion], Path]


class Display(Protocol):
    def begin(self, to_run: int, reused: int) -> None: ...
    def warn(self, message: str) -> None: ...
    def start_cell(self, spec: CellSpec, where: str | None = None) -> None: ...
    def cell_progress(self, spec: CellSpec, phase: str, done: int, total: int) -> None: ...
    def finish_cell(self, record: CellRecord) -> None: ...


@dataclass(frozen=True)
class Running:
    """A cell started and not yet recorded: its ids, and what the run has heard of it."""

    spec: CellSpec
    ids: tuple[str, str | None]  # (the record's id, its tracker run's id)
    watch: Watch


@dataclass(frozen=True)
class Ran:
    """A cell's record as its run gave it back, and what the runner's stages add to it before it is
    finished (records.finish), each stage its own fields."""

    record: CellRecord
    identity: dict[str, Any] = field(default_factory=dict)  # batch search: the cell's own identity, the search
    timing: dict[str, Any] = field(default_factory=dict)  # how it was timed beside its comparison's cells


class MatrixRunner:
    def __init__(
        self,
        matrix: Matrix,
        cells: Sequence[CellSpec],
        directory: RunDirectory,
        tracker: Tracker,
        display: Display,
        resume: bool = False,
        environment: dict[str, object] | None = None,
        reporter: Reporter | None = None,
        executor: Executor | None = None,
    ) -> None:
        """`environment`: facts the cell can't see itself (the container image); they fill gaps only.
        `reporter`: writes the report of the finished matrix and returns its folder.
        `executor`: where cells run (amp_suite.execution.executors); by default one at a time on this box."""
        self.matrix = matrix
        self.cells = list(cells)
        self.directory = directory
        self.tracker = tracker
        self.display = display
        self.resume = resume
        self.environment = environment or {}
        self.reporter = reporter
        self.executor = executor or OnThisBox()
        self.report_folder: Path | None = None  # where run() wrote the report, if it did
        self._searches: dict[str, BatchSearch] = {}  # batch_sizes auto: one search serves every seed
        self._search_locks: dict[str, threading.Lock] = {}  # concurrent seeds wait for that one search
        self._running: dict[str, Running] = {}  # by cell id: a stopped run records what they measured
        self.recorded = 0  # records this run appended to results.jsonl

    def plan(self) -> tuple[list[CellSpec], list[CellRecord]]:
        """(cells to run, records reused from an earlier run of the same cells with --resume)."""
        previous, unreadable = self.directory.results.read()
        if unreadable:
            self.display.warn(f"{unreadable} unreadable line(s) in {self.directory.results.path} were skipped")
        if not self.resume:
            return self.cells, []
        done = {record.resume_key: record for record in previous if record.status == OK}
        keys = [(spec.cell_id, spec.config_hash) for spec in self.cells]
        todo = [spec for spec, key in zip(self.cells, keys, strict=True) if key not in done]
        return todo, [done[key] for key in keys if key in done]

    def run(self, experiment: str, matrix_text: str) -> tuple[Conclusion, Outcome]:
        """The matrix's conclusion, worked out once as it ends and handed to the tracker and the report, and
        its outcome."""
        todo, records = self.plan()
        invocation = InvocationStarted.now(
            experiment, matrix_text, self.matrix.model_dump(mode="json"), len(todo), [r.identity for r in records]
        )
        started = False
        try:
            self.tracker.start(invocation, self.matrix)  # a store that can't be used stops us here
            self._close_orphans()
            self.directory.invocations.start(invocation)
            started = True
            self.display.begin(len(todo), len(records))
            records += self._run_cells(todo, invocation.invocation_id)
            conclusion = Conclusion.of(records)
            outcome = judge(records, conclusion.rows, self.matrix.expect)
            self.report_folder, unwritten = self._report(conclusion)
            if unwritten is not None:
                outcome = outcome.unwritten(unwritten)
            self.tracker.finish(conclusion, outcome, self.report_folder)
        except BaseException as exc:
            ending, why = _how_it_stopped(exc)
            if isinstance(exc, KeyboardInterrupt):
                self._keep_interrupted(signal_of(exc).name, invocation.invocation_id)
            self.tracker.abort(ending, why)
            if started:
                self._end(invocation.invocation_id, ending, why)
            raise
        self._end(invocation.invocation_id, "finished")
        return conclusion, outcome

    def _run_cells(self, todo: list[CellSpec], invocation_id: str) -> list[CellRecord]:
        slots = self.executor.prepare(todo)
        if slots is not None:
            return self._run_concurrently(todo, invocation_id, slots)
        done = []
        for cells in comparisons(todo):
            alone = why_alone(cells, self.matrix, shared=False)
            if len(cells) > 1 and alone is None:
                done += self._run_side_by_side(cells, invocation_id)
                continue
            for spec in cells:  # one at a time, in this thread
                ids = self._start(spec)
                run = self.executor.runner(self.directory.log_path(spec.cell_id), (), None, watch=self._watch(spec))
                ran = self._measure(spec, run, partial(self.display.cell_progress, spec))
                ran = replace(ran, timing={"ran_alone": alone}) if len(cells) > 1 else ran
                done.append(self._finish(ran, ids, invocation_id))
        return done

    def _run_concurrently(self, todo: list[CellSpec], invocation_id: str, slots: list[str]) -> list[CellRecord]:
        ids: dict[str, tuple[str, str | None]] = {}
        done: dict[str, CellRecord] = {}
        alone = {spec.cell_id: why_alone(cells, self.matrix, shared=True)
                 for cells in comparisons(todo) if len(cells) > 1 for spec in cells}  # fmt: skip

        def start(spec: CellSpec, held: tuple[str, ...] = ()) -> None:
            ids[spec.cell_id] = self._start(spec, self.executor.where(held) if held else None)

        def finish(spec: CellSpec, ran: Ran) -> None:
            done[spec.cell_id] = self._finish(ran, ids.pop(spec.cell_id), invocation_id)

        def launch(spec: CellSpec, held: tuple[str, ...], cancelled: threading.Event, progress: Progress) -> Ran:
            run = self.executor.runner(self.directory.log_path(spec.cell_id), held, cancelled, watch=self._watch(spec))
            return replace(self._measure(spec, run, progress), timing={"ran_alone": alone.get(spec.cell_id)})

        reasons = {spec.cell_id: self.executor.unrunnable(spec) for spec in todo}
        for spec in todo:
            if reasons[spec.cell_id]:  # recorded, not dropped: the summary shows why it is missing
                start(spec)
                finish(spec, Ran(CellRecord.for_spec(spec, SKIPPED, reasons[spec.cell_id])))
        runnable = [spec for spec in todo if not reasons[spec.cell_id]]
        Scheduler(slots).run(runnable, start, launch, finish, self.display.cell_progress)
        return [done[spec.cell_id] for spec in todo]

    def _run_side_by_side(self, cells: list[CellSpec], invocation_id: str) -> list[CellRecord]:
        """One comparison's cells, taking turns on the device (execution.side_by_side): each waits
        in a thread of its own for its seat, or, where it has none, to run alone after the others."""
        comparison = SideBySide(cells)
        index = {spec.cell_id: i for i, spec in enumerate(cells)}
        ids: dict[str, tuple[str, str | None]] = {}
        done: dict[str, CellRecord] = {}
        group_id = new_id()

        def start(spec: CellSpec, held: tuple[str, ...]) -> None:
            ids[spec.cell_id] = self._start(spec)

        def finish(spec: CellSpec, ran: Ran) -> None:
            done[spec.cell_id] = self._finish(ran, ids.pop(spec.cell_id), invocation_id)

        def launch(spec: CellSpec, held: tuple[str, ...], cancelled: threading.Event, progress: Progress) -> Ran:
            i, log, watch = index[spec.cell_id], self.directory.log_path(spec.cell_id), self._watch(spec)
            record = None
            if comparison.admit(i, cancelled):
                record = self.executor.runner(log, (), cancelled, comparison.seat(i), watch)(spec, progress)
            alone = comparison.alone(i, record.status if record else "refused")
            if alone is None:
                paired = comparison.paired(i)
                return Ran(record, timing={"side_by_side_id": group_id if paired else None, "turn_order": paired})
            comparison.wait_over(cancelled)
            with comparison.alone_lock:
                record = self.executor.runner(log, (), cancelled, watch=watch)(spec, progress)
            return Ran(record, timing={"ran_alone": alone})

        seats = [f"seat-{i}" for i in range(len(cells))]
        Scheduler(seats).run(cells, start, launch, finish, self.display.cell_progress)
        return [done[spec.cell_id] for spec in cells]

    def _start(self, spec: CellSpec, where: str | None = None) -> tuple[str, str | None]:
        """(the record's id, its tracker run's id)."""
        record_id = new_id()
        self.display.start_cell(spec, where)
        ids = record_id, self.tracker.start_cell(spec, record_id)
        windows = len(window_edges(spec.steps)) - 1
        self._running[spec.cell_id] = Running(spec, ids, Watch(window_steps=spec.steps // max(1, windows)))
        return ids

    def _watch(self, spec: CellSpec) -> Watch:
        return self._running[spec.cell_id].watch

    def _finish(self, ran: Ran, ids: tuple[str, str | None], invocation_id: str) -> CellRecord:
        runner = self._completion(ran.record, *ids, invocation_id)
        record = finished(ran.record, {"batch search": ran.identity, "comparison": ran.timing, "runner": runner})
        self._running.pop(record.cell_id, None)
        self.directory.results.append(record)  # the record of truth first, then the mirror
        self.recorded += 1
        self.tracker.finish_cell(record)
        self.display.finish_cell(record)
        return record

    def _keep_interrupted(self, signal_name: str, invocation_id: str) -> None:
        """A stopped run's cells that had started, recorded interrupted, with the windows
        they finished (their processes have ended: the run waits for them before it gets here).
        Only in results.jsonl: the tracker closes their runs as killed (`abort`). --resume runs them again."""
        for running in list(self._running.values()):
            watch, spec = running.watch, running.spec
            measured = f"{len(watch.windows)} window(s) measured" if watch.windows else "no window measured"
            reason = f"interrupted by {signal_name} in {watch.where()}: {measured}; --resume runs it again"
            record = CellRecord.for_spec(spec, INTERRUPTED, reason, **watch.probed, throughput_windows=watch.windows)
            log = {"log_path": str(self.directory.log_path(spec.cell_id))}
            record = finished(record, {"worker": log, "runner": self._completion(record, *running.ids, invocation_id)})
            try:
                self.directory.results.append(record)
            except LineWriteError:
                return  # the disk is full: the stop goes on without them
            self.recorded += 1
        self._running.clear()

    def _measure(self, spec: CellSpec, run: RunOne, progress: Progress) -> Ran:
        if spec.batch_size != AUTO_BATCH:
            return Ran(run(spec, progress))
        unsupported = batch_search.unsupported_reason(spec.device)
        if unsupported:
            return Ran(CellRecord.for_spec(spec, SKIPPED, unsupported))
        search = self._search(spec, run, progress)
        if search.skipped:  # no batch runs here (bf16 on a V100): the cell says why, as a fixed batch would
            return Ran(CellRecord.for_spec(spec, SKIPPED, search.skipped, batch_search=search))
        if search.found is None:
            status, reason = (FAILED, search.failure) if search.failure else (OOM, "not even batch 1 fits")
            return Ran(CellRecord.for_spec(spec, status, reason, batch_search=search))
        record = run(spec.model_copy(update={"batch_size": search.found}), progress)
        # The record keeps the cell's identity (batch "auto"), so --resume and the summary find it.
        identity = {"cell_id": spec.cell_id, "config_hash": spec.config_hash, "config": spec.model_dump(mode="json")}
        return Ran(record, identity={**identity, "batch_search": search})

    def _search(self, spec: CellSpec, run: RunOne, progress: Progress) -> BatchSearch:
        key = spec.model_copy(update={"seed": 0}).config_hash
        with self._search_locks.setdefault(key, threading.Lock()):
            if key not in self._searches:

                def probe(trial: CellSpec) -> CellRecord:
                    return run(trial, lambda phase, *steps: progress(f"probe bs{trial.batch_size}: {phase}", *steps))

                self._searches[key] = search_batch(spec, spec.workload.samples, probe)
            return self._searches[key]

    def _report(self, conclusion: Conclusion) -> tuple[Path | None, str | None]:
        """(the report's folder, None) or (None, why it was not written). The records are safe
        already, and `amp-suite report` can write it from them once the cause is gone."""
        if self.reporter is None:
            return None, None
        try:
            return self.reporter(conclusion), None
        except Exception as exc:
            why = f"report: not written ({describe_error(exc)}); `amp-suite report` writes it from the records"
            self.display.warn(why)
            return None, why

    def _close_orphans(self) -> None:
        orphans = self.directory.invocations.unfinished()
        for orphan in orphans:
            self.directory.invocations.end(orphan.invocation_id, "killed", orphan.killed_note())
        if orphans:
            self.display.warn(
                f"{len(orphans)} earlier run(s) in {self.directory.path} were killed before they ended;"
                " marking the tracker runs they left open KILLED"
            )
            self.tracker.close_orphans(orphans)

    def _end(self, invocation_id: str, outcome: Ending, detail: str | None = None) -> None:
        try:
            self.directory.invocations.end(invocation_id, outcome, detail)
        except LineWriteError:
            pass  # e.g. the disk is full; the next run records this invocation as killed instead

    def _completion(self, record: CellRecord, record_id: str, run_id: str | None, invocation_id: str) -> dict[str, Any]:
        """What the cell could not know: its ids, the parity rule, deployment facts (filling gaps only)."""
        known = {key: value for key, value in record.environment.items() if value is not None}
        return {
            "record_id": record_id,
            "invocation_id": invocation_id,
            "tracker_run_id": run_id,
            "parity_rule": self.matrix.parity,
            "environment": {**self.environment, **known},
        }


def _how_it_stopped(exc: BaseException) -> tuple[Ending, str]:
    if isinstance(exc, KeyboardInterrupt):
        name = signal.Signals(getattr(exc, "signum", signal.SIGINT)).name
        return SIGNALLED, f"amp-suite was stopped by {name}"
    return "stopped", f"amp-suite stopped: {describe_error(exc)}"
