"""Where a report's records come from: run folders, results.jsonl files, or an MLflow experiment.

A record found in several sources (a folder and the server it was synced to) is counted once,
by its identity. Reading MLflow needs the store only: each cell run carries its record as the
`record.json` artifact, exactly as results.jsonl holds it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from amp_suite.config import ConfigError
from amp_suite.files import open_regular, read_limited
from amp_suite.paths import check_path, is_folder, shown
from amp_suite.records.results import CellRecord, DistinctRecords, ResultsFile, StoredRecord, describe_error
from amp_suite.records.rundir import RunDirectory
from amp_suite.report.prediction import Estimated, PredictionFile
from amp_suite.tracking.uri import check_tracking_store

PREDICTION_LIMIT = 16 << 20  # prediction.json: a few kB a GPU; anything this large is not one


class Gathered(DistinctRecords):
    """The records of every source, each once, and how many lines or runs could not be read."""

    def __init__(self) -> None:
        super().__init__()
        self.unreadable = 0

    def add_source(self, records: list[CellRecord], unreadable: int) -> None:
        self.unreadable += unreadable
        self.add(records)


def results_file(source: str) -> Path | None:
    """The results.jsonl a source names: the file itself (whatever it is: its reader refuses what
    is not a regular file, saying so), or the one in a run folder; None for an experiment's name."""
    path = Path(source)
    if is_folder(path):
        return RunDirectory(path).results.path
    if _lexists(source):
        return path
    return None


def estimates_in(sources: list[str]) -> tuple[list[Estimated], list[str]]:
    """The estimates `amp-suite predict --results` left in each run folder among the sources, and
    a line for each such file that could not be read (left out of the report, said so)."""
    found: list[Estimated] = []
    unread: list[str] = []
    for source in sources:
        if not is_folder(Path(source)):
            continue
        path = RunDirectory(Path(source)).prediction
        try:
            data = read_limited(path, PREDICTION_LIMIT)
            if data is not None:
                found += PredictionFile.model_validate_json(data).estimated
        except (ConfigError, ValidationError, OSError) as exc:
            unread.append(f"{shown(path)}: {describe_error(exc)[:300]}")
    return found, unread


def check_sources(sources: list[str], tracking_uri: str | None) -> None:
    """Cheap checks before anything is read: each source is a path that can be read, or (given a
    store) an experiment name; reading an experiment needs a store that is there."""
    experiments = False
    for source in sources:
        if tracking_uri is None or _lexists(source):  # a path, not an experiment's name
            check_path(Path(source))  # a loop, a name too long, /proc and the like
        path = results_file(source)
        if path is not None:
            with open_regular(path) as handle:  # a FIFO, a device, a dangling link: said as such
                if handle is None:
                    raise ConfigError(f"{shown(source)}: not a run folder (no results.jsonl in it)")
        if path is None and tracking_uri is None:
            raise ConfigError(
                f"{shown(source)}: no such run folder or results file (to read an MLflow experiment by name,"
                " give --tracking-uri)"
            )
        experiments = experiments or path is None
    if experiments and tracking_uri is not None:
        check_tracking_store(tracking_uri, existing=True)  # its driver installed; a SQLite file is there


def _lexists(source: str) -> bool:
    try:
        os.lstat(source)
    except (OSError, ValueError):  # nothing there, a name too long, a NUL byte
        return False
    return True


def gather(sources: list[str], tracking_uri: str | None) -> Gathered:
    gathered = Gathered()
    for source in sources:
        path = results_file(source)
        if path is not None:
            gathered.add_source(*ResultsFile(path).read())
        else:
            gathered.add_source(*_experiment_records(source, tracking_uri))
    return gathered


def _record_of(store, run_id: str, scratch: Path) -> dict:
    """The run's record.json, with the dtype audit that is logged beside it rather than in it."""
    data = json.loads(Path(store.client.download_artifacts(run_id, "record.json", str(scratch))).read_text())
    if any(f.path == "dtype_audit.json" for f in store.client.list_artifacts(run_id)):
        audit = store.client.download_artifacts(run_id, "dtype_audit.json", str(scratch))
        data["dtype_audit"] = json.loads(Path(audit).read_text())
    return data


def _experiment_records(experiment: str, tracking_uri: str | None) -> tuple[list[CellRecord], int]:
    from mlflow.exceptions import MlflowException

    from amp_suite.tracking.logs import route_store_logs
    from amp_suite.tracking.mlflow_store import MlflowStore

    route_store_logs(None)  # a failing store is one line from the CLI, not MLflow's log dump
    try:
        store = MlflowStore(tracking_uri or "")
        store.check_reachable()
        experiment_id = store.experiment_id(experiment, create=False)
    except ConnectionError:
        raise
    except Exception as exc:  # not a database, a schema from another MLflow, a server that errs
        raise ConnectionError(describe_error(exc)) from exc
    if experiment_id is None:
        raise ConfigError(f"{experiment[:200]}: no such experiment in {tracking_uri}")
    records, unreadable = [], 0
    # A cell run without a readable record.json: often a moved folder whose store still points at
    # the old artifact path (`amp-suite ui --out FOLDER` repoints it).
    with tempfile.TemporaryDirectory(prefix="amp-suite-report-") as scratch:
        for run in store.cell_runs(experiment_id):  # oldest first, the order results.jsonl has them in
            try:
                records.append(StoredRecord.model_validate(_record_of(store, run.info.run_id, Path(scratch))))
            except (OSError, ValueError, ValidationError, MlflowException):  # e.g. its artifacts are gone
                unreadable += 1
    return records, unreadable
