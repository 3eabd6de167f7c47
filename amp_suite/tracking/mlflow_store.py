"""What amp-suite writes to MLflow, and how it finds it again. Used by the tracker and by sync.

One experiment per matrix, a parent run per invocation and a nested child run per cell record,
written with MlflowClient (no global "active run" state). Built for review in the UI: a parent is
named for its GPU model and host, opens on the answer and carries the environment and the report;
each child has workload, precision and batch size as params, its verdict line as its description,
the few metrics people compare as charts (cell_view) and its parity verdict as a tag, so the UI can
group, sort and search them (`tags.parity = "fail"`). A store the suite makes holds no empty
Default experiment. Every run is tagged with the ids of
its invocation and record, and marked complete as the last thing logged to it: sync finds
runs by those tags, skips complete ones and re-logs incomplete ones. Metric timestamps come from
the record, not the clock, so logging the same record twice adds nothing (MLflow ignores a
metric identical in key, timestamp, step and value).
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from amp_suite.analysis.answer import INCONCLUSIVE, Answer
from amp_suite.analysis.conclusion import Conclusion
from amp_suite.analysis.quantities import FAIL
from amp_suite.analysis.summary import SummaryRow, group_key
from amp_suite.analysis.words import ratio_words
from amp_suite.config.base import DIVERGED, FAILED, INTERRUPTED, OK, OOM, SKIPPED
from amp_suite.errors import ConfigError
from amp_suite.paths import shown
from amp_suite.records.invocations import InvocationStarted
from amp_suite.records.jsonl import json_safe
from amp_suite.records.results import CellRecord
from amp_suite.records.rundir import is_plain_file
from amp_suite.tracking import cell_view, empty_store
from amp_suite.tracking.relocate import artifact_location, pin_artifacts
from amp_suite.tracking.uri import UI_VIEW_KEY, check_server_answers, for_mlflow, sqlite_database
from amp_suite.tracking.uri import artifact_root as default_artifact_root

TAG_INVOCATION = "amp_suite.invocation_id"
TAG_RECORD = "amp_suite.record_id"
TAG_COMPLETE = "amp_suite.complete"
TAG_ENDED_BY = "amp_suite.ended_by"
PARENT = "mlflow.parentRunId"
# A skipped cell has no status here: its run is set aside (set_aside).
RUN_STATUS = {OK: "FINISHED", FAILED: "FAILED", DIVERGED: "FAILED", OOM: "FAILED",
              INTERRUPTED: "KILLED"}  # fmt: skip
# What MLflow 3.x's UI itself reads for its mode is the browser's choice (uri.ui_link), not this tag;
# the tag says what the experiment is to MLflow's APIs and to a UI that honours it.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
DEFAULT_EXPERIMENT = "0"  # the "Default" experiment MLflow's SQL store makes on first use
# The runs table as a link with viewStateShareKey=amp-suite opens it (uri.ui_link): MLflow's UI reads
# plain JSON from this experiment tag (cell_view.runs_view: each precision its own group, beside the
# others, with the verdict's columns; MLflow otherwise folds a parent's cells behind a "+").
RUNS_VIEW_TAG = f"mlflow.sharedViewState.{UI_VIEW_KEY}"
MLFLOW_GIT_COMMIT = "mlflow.source.git.commit"  # MLflow's own tags (mlflow.utils.mlflow_tags)
MLFLOW_NOTE = "mlflow.note.content"  # a run's description in the UI
MLFLOW_DATASET_CONTEXT = "mlflow.data.context"
SQLITE_FULL = 13  # sqlite3.SQLITE_FULL from Python 3.11


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container's uid without a passwd entry
        return "unknown"


# What MLflow's UI shows as a run's Source and Created by (the fluent API sets them; the client does not).
SOURCE_TAGS = {"mlflow.source.name": "amp-suite", "mlflow.source.type": "LOCAL", "mlflow.user": _user()}
MAX_METRICS_PER_CALL = 1000  # MlflowClient.log_batch limits
MAX_TAGS_PER_CALL = 100
MAX_TAG_LENGTH = 5000  # what every MLflow backend keeps of a tag's value


@dataclass(frozen=True)
class Held:
    """What a parent run holds: its cells' records (whose statuses it counts), each with a run of its
    own, by id (their verdicts go there), and when it started (the verdicts' timestamp)."""

    records: Sequence[CellRecord]
    runs: Sequence[tuple[CellRecord, str]]
    stamp: str


class MlflowStore:
    def __init__(self, tracking_uri: str, artifact_root: Path | None = None) -> None:
        """`artifact_root`: where a run folder's own store keeps its artifacts (<out>/mlartifacts);
        the store is pinned there each time it opens. A SQLite store the suite makes is pinned
        beside its database; other stores locate artifacts as they were set up to."""
        try:
            from mlflow import MlflowClient, entities
        except ImportError as exc:
            raise RuntimeError(f"MLflow is not installed: pip install mlflow ({exc})") from exc
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # schema-migration chatter
        self._entities = entities
        self.uri = tracking_uri
        # A SQLite store keeps its artifacts beside its database, never in the working directory's ./mlruns.
        self.artifact_root = artifact_root if artifact_root is not None else default_artifact_root(tracking_uri)
        database = sqlite_database(tracking_uri)
        with _first_use(database) as new:
            self.client = MlflowClient(tracking_uri=for_mlflow(tracking_uri))  # creates (or migrates) the store
            if database is not None and self.artifact_root is not None and (new or artifact_root is not None):
                # MLflow has just made its Default experiment in ./mlruns; a copied or edited store points anywhere.
                pin_artifacts(database, self.artifact_root)
            if new:
                self._retire_default()

    def _retire_default(self) -> None:
        """A store the suite made holds its matrices' experiments only: MLflow's empty Default
        experiment is deleted (kept as deleted, so MLflow does not make it again on the next open)."""
        from mlflow.exceptions import MlflowException

        try:
            default = self.client.get_experiment(DEFAULT_EXPERIMENT)
        except MlflowException:  # none made: nothing to retire
            return
        if default.lifecycle_stage == "active" and not self.client.search_runs([DEFAULT_EXPERIMENT], max_results=1):
            self.client.delete_experiment(DEFAULT_EXPERIMENT)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold a SQLite store for one writer at a time: two syncs of the same records would both
        find a run missing and both create it. An flock on the database file, as its first use
        takes (SQLite's own locks are fcntl locks, which it does not touch). A server or another
        database has no such lock: two syncs at once may still duplicate a run there."""
        database = sqlite_database(self.uri)
        if database is None:
            yield
            return
        with open(database, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def check_reachable(self) -> None:
        """One bounded request before anything else (uri.check_server_answers)."""
        check_server_answers(self.uri)

    # -- finding and creating runs ---------------------------------------------------------

    def experiment_id(self, name: str, create: bool = True) -> str | None:
        found = self.client.get_experiment_by_name(name)
        if found is not None and found.experiment_id == DEFAULT_EXPERIMENT and found.lifecycle_stage == "deleted":
            if not create:  # retired while empty (_retire_default): nothing of ours is in it
                return None
            self.client.restore_experiment(DEFAULT_EXPERIMENT)  # a matrix named "Default" asks for it back
            for key, value in EXPERIMENT_KIND.items():
                self.client.set_experiment_tag(DEFAULT_EXPERIMENT, key, value)
            found = self.client.get_experiment(DEFAULT_EXPERIMENT)
        if found is not None:
            if create:  # one an earlier version made may average precisions together; a reader writes nothing
                self.refresh_view(found.experiment_id, found.tags.get(RUNS_VIEW_TAG))
            return found.experiment_id
        if not create:
            return None
        location = artifact_location(self.artifact_root) if self.artifact_root else None
        tags = {**EXPERIMENT_KIND, RUNS_VIEW_TAG: json.dumps(cell_view.runs_view())}
        return self.client.create_experiment(name, artifact_location=location, tags=tags)

    def refresh_view(self, experiment_id: str, current: str | None = None) -> None:
        """The experiment's saved view for the cells it now holds: a column for each throughput
        unit they were measured in, and machine as a group where several machines' cells meet
        (a sync from another box). Written only where it differs from `current`."""
        cells = [run for run in self.cell_runs(experiment_id) if run.info.lifecycle_stage == "active"]
        for run in cells:  # logged by an earlier version: without them, the view would leave the cell ungrouped
            if cell_view.MODE not in run.data.tags and "cell_id" in run.data.tags:
                self._batch(run.info.run_id, tags=cell_view.view_tags(run.data.tags["cell_id"]))
        metric_keys = {key for run in cells for key in run.data.metrics}
        machines = {run.data.tags.get(cell_view.MACHINE) for run in cells}
        view = json.dumps(cell_view.runs_view(metric_keys, several_machines=len(machines) > 1))
        if view != current:
            self.client.set_experiment_tag(experiment_id, RUNS_VIEW_TAG, view)

    def runs_of(self, experiment_id: str, invocation_id: str, running_only: bool = False) -> list[Any]:
        query = f"tags.`{TAG_INVOCATION}` = '{invocation_id}'"
        if running_only:
            query += " and attributes.status = 'RUNNING'"
        return self.search(experiment_id, query)

    def cell_runs(self, experiment_id: str) -> list[Any]:
        """Every cell's run, oldest first: the active ones, and the skipped cells' runs set aside."""
        runs = self.search(experiment_id, deleted_too=True)
        cells = [r for r in runs if TAG_RECORD in r.data.tags]
        cells = [r for r in cells if r.info.lifecycle_stage == "active" or r.data.tags.get("status") == SKIPPED]
        return sorted(cells, key=lambda run: run.info.start_time or 0)  # the store returns newest first

    def search(self, experiment_id: str, query: str = "", deleted_too: bool = False) -> list[Any]:
        """Every run of the experiment that the query selects (all pages)."""
        from mlflow.entities import ViewType

        view = ViewType.ALL if deleted_too else ViewType.ACTIVE_ONLY
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], query, view, max_results=1000, page_token=token)
            runs += list(page)
            token = page.token
            if not token:
                return runs

    def create_parent(self, experiment_id: str, invocation_id: str, name: str, params: dict[str, Any]) -> str:
        tags = {TAG_INVOCATION: invocation_id, **SOURCE_TAGS}
        run_id = self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        self._batch(run_id, params=params)
        return run_id

    def create_invocation_run(self, experiment_id: str, started: InvocationStarted) -> str:
        """The parent run of an invocation: named for its matrix and start, with the matrix."""
        params = matrix_params(started.matrix_config)
        name = f"{started.matrix} · {_stamp(started.at)} · {started.host}"  # the device is named once known
        run_id = self.create_parent(experiment_id, started.invocation_id, name, params)
        self.client.log_text(run_id, started.matrix_text, "matrix.yaml")
        return run_id

    def create_child(self, experiment_id: str, parent_id: str | None, invocation_id: str, record_id: str, cell_id: str):
        tags = {TAG_INVOCATION: invocation_id, TAG_RECORD: record_id, "cell_id": cell_id, **SOURCE_TAGS}
        if parent_id is not None:
            tags[PARENT] = parent_id
        return self.client.create_run(experiment_id, run_name=child_run_name(cell_id), tags=tags).info.run_id

    # -- logging -----------------------------------------------------------------------------

    def log_record(self, run_id: str, record: CellRecord, log_file: Path | None) -> None:
        """Everything a cell record says: params, the few charted metrics (cell_view), tags, the
        cell's line as its description, and artifacts (record.json, diagnostics.json, its log).
        The loss-scale and evaluation curves are in record.json."""
        stamp = _millis(record.started_at)
        metrics = cell_view.record_metrics(record)
        tags: dict[str, Any] = {"status": record.status, "reason": record.reason, "cell_id": record.cell_id}
        tags |= cell_view.view_tags(record.cell_id)  # what the saved view groups and orders by
        tags[MLFLOW_NOTE] = cell_view.verdict_line(record, None)  # the summary's line replaces it (log_verdicts)
        if record.machine is not None:
            tags[cell_view.MACHINE] = record.machine.key
        if record.loss_scale_warning is not None:
            tags["loss_scale_warning"] = record.loss_scale_warning
        if record.dtype_audit:
            tags.update({f"audit.{check}": ok for check, ok in record.dtype_audit["checks"].items()})
        tags.update({f"env.{key}": value for key, value in record.environment.items()})
        if record.environment.get("git_commit"):  # where MLflow's UI looks for a run's source version
            tags[MLFLOW_GIT_COMMIT] = record.environment["git_commit"]
        self._batch(run_id, params=cell_params(record), tags=tags, metrics=metrics, timestamp=stamp)
        if record.data_fingerprint is not None:
            self._log_dataset(run_id, record)
        # The record as results.jsonl holds it: non-finite values as strings, like every line there.
        self.client.log_dict(run_id, json.loads(record.model_dump_json(exclude={"dtype_audit"})), "record.json")
        self.client.log_dict(run_id, json_safe(cell_view.record_diagnostics(record)), cell_view.DIAGNOSTICS)
        if record.dtype_audit:
            self.client.log_dict(run_id, record.dtype_audit, "dtype_audit.json")
        if log_file is not None and is_plain_file(log_file):  # never a link to a file elsewhere
            self.client.log_artifact(run_id, str(log_file), "logs")

    def _log_dataset(self, run_id: str, record: CellRecord) -> None:
        """The data the cell trained on as the run's dataset input, its fingerprint as the digest:
        runs that saw the same data show the same dataset in the UI."""
        e = self._entities
        source = record.data_source or "unknown"
        name = f"{record.workload}:{source}"
        dataset = e.Dataset(name=name, digest=record.data_fingerprint, source_type="amp-suite", source=source)
        context = e.InputTag(key=MLFLOW_DATASET_CONTEXT, value="train")
        self.client.log_inputs(run_id, datasets=[e.DatasetInput(dataset=dataset, tags=[context])])

    def finish_record(self, run_id: str, record: CellRecord) -> None:
        """The last call for a logged record's run: completed with its status, or set aside if skipped."""
        if record.status == SKIPPED:
            self.set_aside(run_id, record)
        else:
            self.complete(run_id, RUN_STATUS[record.status])

    def set_aside(self, run_id: str, record: CellRecord) -> None:
        """A skipped cell measured nothing: its run leaves the runs table (deleted, with its reason
        kept on it) instead of standing there as a finished run without metrics. The parent lists it."""
        self._batch(run_id, tags={"status": record.status, "reason": record.reason, TAG_COMPLETE: "true"})
        self.client.set_terminated(run_id, "KILLED")  # it did not run: not FINISHED
        self.client.delete_run(run_id)

    def log_summary(self, run_id: str, summary: Sequence[SummaryRow]) -> None:
        """The summary as a table artifact on the parent; the verdicts themselves go on each child
        (log_verdicts), where the UI can chart, sort and search them."""
        self.client.log_dict(run_id, json_safe([row.as_dict() for row in summary]), "summary.json")

    def log_verdicts(self, summary: Sequence[SummaryRow], runs: Sequence[tuple[CellRecord, str]], stamp: str) -> None:
        """Each child's speedup (charted), parity verdict (a tag to search by), its verdict line as its
        description, and the summary's details in diagnostics.json beside the record's own.
        `runs`: (record, the id of its run in this store)."""
        rows = {(row.machine, row.setup, row.precision): row for row in summary}
        for record, run_id in runs:
            row = rows.get(group_key(record))
            if row is None or record.status == SKIPPED:  # a skipped cell's run is set aside: nothing to add
                continue
            # The speedup with its interval, as a column beside the charted value (cell_view.view_columns).
            tags = {cell_view.SPEEDUP: ratio_words(row.speedup), "noisy": row.noisy, "throttled": row.throttled}
            tags[MLFLOW_NOTE] = cell_view.verdict_line(record, row)[:MAX_TAG_LENGTH]
            if (p := row.parity) is not None:
                tags |= {cell_view.PARITY: p.verdict, "parity_invalid": p.invalid.words if p.invalid else None}
            if row.time_to_target is not None:
                tags["target"] = row.time_to_target.described
            if row.bound is not None:
                tags["bound"] = row.bound.bound
            self._batch(run_id, tags=tags, metrics=cell_view.verdict_metrics(record, row), timestamp=_millis(stamp))
            diagnostics = cell_view.record_diagnostics(record) | cell_view.verdict_diagnostics(record, row)
            self.client.log_dict(run_id, json_safe(diagnostics), cell_view.DIAGNOSTICS)
        if runs:  # the view's columns follow the units its cells were measured in
            experiment_id = self.client.get_run(runs[0][1]).info.experiment_id
            self.refresh_view(experiment_id, self.client.get_experiment(experiment_id).tags.get(RUNS_VIEW_TAG))

    def describe_parent(self, run_id: str, record: CellRecord, matrix: str, stamp: str) -> None:
        """Name the parent for the machine it measured and carry that machine's environment."""
        if record.machine is None:
            return
        host = record.machine.host or "unknown host"
        # The device model first, short: the runs table shows about 20 characters of a name.
        self.client.update_run(run_id, name=f"{record.machine.model_name} · {matrix} · {_stamp(stamp)}")
        tags = {f"env.{key}": value for key, value in record.environment.items()}
        if record.environment.get("git_commit"):
            tags[MLFLOW_GIT_COMMIT] = record.environment["git_commit"]
        tags |= {"machine": record.machine.key, "gpu": record.machine.model_name, "host": host}
        self._batch(run_id, tags=tags)

    def conclude(self, run_id: str, conclusion: Conclusion, held: Held, report: Path | None,
                 ending: tuple[str, dict[str, Any]]) -> None:  # fmt: skip
        """Finish a parent run, the one way for the live tracker and for sync: the summary, the answer,
        each child's verdicts, the report (None: none to log), and last its `ending`: (MLflow's
        status, the tags that say how it ended)."""
        self.log_summary(run_id, conclusion.rows)
        self.log_overview(run_id, conclusion, held.records)
        self.log_verdicts(conclusion.rows, held.runs, held.stamp)
        if report is not None:
            self.log_report(run_id, report)
        self.complete(run_id, *ending)

    def log_overview(self, run_id: str, conclusion: Conclusion, records: Sequence[CellRecord]) -> None:
        """The parent's description opens on the answer: the UI folds a note after its first line or
        two, so the first line is an answer sentence, not a heading. Its counts are tags, not
        charts: the children's metrics are what the experiment's charts compare. `records`: the
        cells this parent holds, whose statuses it counts."""
        summary, found = conclusion.rows, conclusion.answers
        lines = overview_lines(found) or ["No answer: no cell finished to compare with fp32."]
        note = "\n\n".join([*lines, "_amp-suite: every mode is compared with fp32, the reference._"])
        tags: dict[str, Any] = {MLFLOW_NOTE: note[:MAX_TAG_LENGTH]}
        tags |= {
            "parity_failures": sum(1 for r in summary if r.parity and r.parity.verdict == FAIL),
            "noisy_rows": sum(1 for r in summary if r.noisy),
            "inconclusive_answers": sum(1 for a in found if a.verdict == INCONCLUSIVE),
        }
        tags |= {f"cells_{status}": count for status, count in Counter(r.status for r in records).items()}
        skipped = "; ".join(f"{r.cell_id}: {r.reason}" for r in records if r.status == SKIPPED)
        tags["skipped_cells"] = skipped[:MAX_TAG_LENGTH] or "none"
        self._batch(run_id, tags=tags)

    def log_report(self, run_id: str, folder: Path) -> None:
        """The report (HTML, Markdown, JSON and figures) as the parent's `report/` artifacts."""
        for path in _plain_files(folder):  # a link in a folder someone handed over leads anywhere: not followed
            self.client.log_artifact(run_id, str(path), str(Path("report", path.parent.relative_to(folder))))

    def complete(self, run_id: str, status: str, tags: dict[str, Any] | None = None) -> None:
        """The last call for a run: sync treats a run without the complete tag as half-logged."""
        self._batch(run_id, tags={**(tags or {}), TAG_COMPLETE: "true"})
        self.client.set_terminated(run_id, status)

    def close(self, run_id: str, status: str, why: str, tags: dict[str, Any] | None = None) -> None:
        """End a run that was interrupted, saying why (it stays incomplete: sync may fill it in)."""
        self._batch(run_id, tags={**(tags or {}), TAG_ENDED_BY: why})
        self.client.set_terminated(run_id, status)

    def _batch(self, run_id, params=None, tags=None, metrics=(), timestamp=None) -> None:
        e = self._entities
        stamp = timestamp if timestamp is not None else int(time.time() * 1000)
        param_list = [e.Param(k, str(v)) for k, v in (params or {}).items()]
        # An unset or empty tag is left off: the UI would list it as an empty value.
        tag_list = [e.RunTag(k, str(v)) for k, v in (tags or {}).items() if v is not None and str(v) != ""]
        metric_list = [e.Metric(k, float(v), stamp, step) for k, v, step in metrics]
        for chunk in _chunks(param_list, MAX_TAGS_PER_CALL):
            self.client.log_batch(run_id, params=chunk)
        for chunk in _chunks(tag_list, MAX_TAGS_PER_CALL):
            self.client.log_batch(run_id, tags=chunk)
        for chunk in _chunks(metric_list, MAX_METRICS_PER_CALL):
            self.client.log_batch(run_id, metrics=chunk)


@contextmanager
def _first_use(database: Path | None) -> Iterator[bool]:
    """Hold an flock on a SQLite store's file while MLflow opens it; yields whether the store is
    new. MLflow creates a new store's tables on first use, in a migration that two processes at
    once break for good (both fail, `_alembic_tmp_*` left behind); the second now waits until the
    first has made the store. SQLite's own locks are fcntl locks, which an flock does not touch.
    A new store is made whole or not at all: one cut short (a full disk, a stop) is emptied again,
    which SQLite and the next first use take as a store still to be made."""
    if database is None:  # a server, or another database: it serialises its own migrations
        yield False
        return
    with open(database, "ab") as handle:  # SQLite takes an empty file as a new database
        fcntl.flock(handle, fcntl.LOCK_EX)
        new = handle.tell() == 0
        try:
            made_by_mlflow = new and not empty_store.seed(handle, database)
            yield new
        except BaseException as exc:
            if not new:
                raise
            _unmake(database, handle)
            if (full := _out_of_room(exc)) is not None:
                raise ConfigError(
                    f"{shown(database)}: no room to create the MLflow store ({full}); make room, then run again"
                ) from None
            raise
        if made_by_mlflow:
            empty_store.keep(database)


def _unmake(database: Path, handle) -> None:
    handle.truncate(0)
    for journal in ("-journal", "-wal", "-shm"):  # a half-made store's: it would be replayed into the next one
        Path(f"{database}{journal}").unlink(missing_ok=True)


def _plain_files(folder: Path) -> list[Path]:
    """The regular files under `folder`, walked without following a symbolic link."""
    found = []
    for parent, _, names in os.walk(folder):  # os.walk does not descend into linked folders
        found += [path for name in sorted(names) if is_plain_file(path := Path(parent, name))]
    return found


def _out_of_room(exc: BaseException | None) -> str | None:
    """Why, if `exc` (or what caused it) is a full disk: an OSError, or SQLite's SQLITE_FULL."""
    for _ in range(16):  # a chain of causes, however it loops
        if exc is None:
            return None
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc.strerror or os.strerror(exc.errno)
        if getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL or "database or disk is full" in str(exc):
            return os.strerror(errno.ENOSPC)
        exc = exc.__cause__ or exc.__context__
    return None


def matrix_params(config: dict[str, Any]) -> dict[str, Any]:
    """The parent run's params, from the resolved matrix as invocations.jsonl keeps it."""
    params = {key: config.get(key) for key in ("name", "steps", "warmup_steps", "repeats", "seed")}
    params["precisions"] = ",".join(config.get("precisions", []))
    params["workloads"] = ",".join(w.get("label") or w.get("workload", "?") for w in config.get("workloads", []))
    return {("matrix" if key == "name" else key): value for key, value in params.items()}


def overview_lines(found: Sequence[Answer]) -> list[str]:
    """One paragraph per comparison, no heading before them: "**mlp** (batch 64, eager): bf16: 1.52x
    faster ..." (the note says "fp32 is the reference" where the fold no longer hides an answer)."""
    timed = {a: f" _({a.timed})_" if a.timed else "" for a in found}
    return [f"**{a.workload}** (batch {a.batch}, {a.variant}): {a.sentence}{timed[a]}" for a in found]


def child_run_name(cell_id: str) -> str:
    """What differs between a parent's children first, so that the runs table's narrow name column
    tells them apart: "bf16 · resnet · bs16 · seed0", then compile mode, layout and DDP axes."""
    parts = cell_id.split("/")
    if len(parts) < 4:
        return cell_id
    workload, batch, seed, precision, *axes = parts
    return " · ".join([precision, workload, batch, *axes, seed])


# The sweep's lists (the cell's own batch size, compile mode and layout are params of their own),
# and the workload's name, which is the `workload` param already.
SWEEP_PARAMS = ("workload.batch_sizes", "workload.compile", "workload.channels_last", "workload.force",
                "workload.ddp", "workload.workload")  # fmt: skip


def cell_params(record: CellRecord) -> dict[str, Any]:
    """The cell's own configuration: no sweep lists, nothing unset."""
    flat = _flatten(record.config)
    own = {key: value for key, value in flat.items() if value is not None and not isinstance(value, list)}
    own = {key: value for key, value in own.items() if not key.startswith(SWEEP_PARAMS)}
    return {**own, "workload": record.workload}  # by name: what the UI groups by


def _stamp(iso: str) -> str:
    """2026-11-30T16:47:59+00:00 -> 20261130-164759 (UTC, sortable)."""
    return iso[:19].replace("-", "").replace(":", "").replace("T", "-")


def _millis(iso: str) -> int:
    try:
        return int(datetime.fromisoformat(iso).timestamp() * 1000)
    except ValueError:
        return 0


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
