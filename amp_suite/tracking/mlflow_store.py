"""What amp-suite writes to MLflow, and how it finds it again. Used by the tracker and by sync.

One experiment per matrix, a parent run per invocation and a nested child run per cell record,
written with MlflowClient (no global "active run" state). Every run is tagged with the ids of
its invocation and record, and marked complete as the last thing logged to it: sync finds
runs by those tags, skips complete ones and re-logs incomplete ones. Metric timestamps come from
the record, not the clock, so logging the same record twice adds nothing (MLflow ignores a
metric identical in key, timestamp, step and value).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from amp_suite.invocations import InvocationStarted
from amp_suite.jsonl import json_safe
from amp_suite.results import CellRecord
from amp_suite.summary import SummaryRow
from amp_suite.tracking.uri import is_server

TAG_INVOCATION = "amp_suite.invocation_id"
TAG_RECORD = "amp_suite.record_id"
TAG_COMPLETE = "amp_suite.complete"
TAG_ENDED_BY = "amp_suite.ended_by"
PARENT = "mlflow.parentRunId"
RUN_STATUS = {"ok": "FINISHED", "skipped": "FINISHED", "failed": "FAILED", "diverged": "FAILED"}
METRIC_FIELDS = (
    "throughput", "step_time_ms_p50", "step_time_ms_p90", "step_time_ms_mean", "step_time_ms_stdev",
    "peak_memory_mb", "peak_memory_reserved_mb", "final_loss", "val_metric", "val_loss",
    "grad_underflow_fraction", "loss_scale", "skipped_steps", "loss_scale_drops", "duration_s",
)  # fmt: skip
MAX_METRICS_PER_CALL = 1000  # MlflowClient.log_batch limits
MAX_TAGS_PER_CALL = 100
REACHABLE_TIMEOUT_S = 5.0


class MlflowStore:
    def __init__(self, tracking_uri: str, artifact_root: Path | None = None) -> None:
        try:
            from mlflow import MlflowClient, entities
        except ImportError as exc:
            raise RuntimeError(f"MLflow is not installed: pip install mlflow ({exc})") from exc
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # schema-migration chatter
        self._entities = entities
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.uri = tracking_uri
        self.artifact_root = artifact_root

    def check_reachable(self) -> None:
        """One bounded request before anything else: an unreachable server fails in seconds, not
        after MLflow's retries. Any HTTP answer (even 401) proves the server is there."""
        if not is_server(self.uri):
            return
        parts = urlsplit(self.uri)
        netloc = parts.netloc.rsplit("@", 1)[-1]  # the health check needs no credentials
        health = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health", "", ""))
        try:
            urllib.request.urlopen(health, timeout=REACHABLE_TIMEOUT_S).close()
        except urllib.error.HTTPError:
            return
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConnectionError(f"no MLflow server answers there ({reason})") from None

    # -- finding and creating runs ---------------------------------------------------------

    def experiment_id(self, name: str, create: bool = True) -> str | None:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        if not create:
            return None
        location = self.artifact_root.resolve().as_uri() if self.artifact_root else None
        return self.client.create_experiment(name, artifact_location=location)

    def runs_of(self, experiment_id: str, invocation_id: str, running_only: bool = False) -> list[Any]:
        query = f"tags.`{TAG_INVOCATION}` = '{invocation_id}'"
        if running_only:
            query += " and attributes.status = 'RUNNING'"
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], query, max_results=1000, page_token=token)
            runs += list(page)
            token = page.token
            if not token:
                return runs

    def create_parent(self, experiment_id: str, invocation_id: str, name: str, params: dict[str, Any]) -> str:
        tags = {TAG_INVOCATION: invocation_id}
        run_id = self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        self._batch(run_id, params=params)
        return run_id

    def create_invocation_run(self, experiment_id: str, started: InvocationStarted) -> str:
        """The parent run of an invocation: named for its matrix and start, with the matrix."""
        stamp = started.at[:19].replace("-", "").replace(":", "").replace("T", "-")
        params = matrix_params(started.matrix_config)
        run_id = self.create_parent(experiment_id, started.invocation_id, f"{started.matrix}-{stamp}", params)
        self.client.log_text(run_id, started.matrix_text, "matrix.yaml")
        return run_id

    def create_child(self, experiment_id: str, parent_id: str | None, invocation_id: str, record_id: str, cell_id: str):
        tags = {TAG_INVOCATION: invocation_id, TAG_RECORD: record_id, "cell_id": cell_id}
        if parent_id is not None:
            tags[PARENT] = parent_id
        return self.client.create_run(experiment_id, run_name=cell_id, tags=tags).info.run_id

    # -- logging -----------------------------------------------------------------------------

    def log_record(self, run_id: str, record: CellRecord, log_file: Path | None) -> None:
        """Everything a cell record says, as params, metrics, tags and artifacts."""
        stamp = _millis(record.started_at)
        metrics = [(key, getattr(record, key), 0) for key in METRIC_FIELDS if getattr(record, key) is not None]
        metrics += [(key, value, 0) for key, value in record.val_metrics.items() if key not in METRIC_FIELDS]
        metrics += [("train_loss", loss, record.warmup_steps + i) for i, loss in enumerate(record.loss_curve)]
        metrics += [("loss_scale_series", scale, step) for step, scale in enumerate(record.loss_scale_curve)]
        tags: dict[str, Any] = {"status": record.status, "reason": record.reason or "", "cell_id": record.cell_id}
        if record.loss_scale_warning is not None:
            tags["loss_scale_warning"] = record.loss_scale_warning
        if record.dtype_audit:
            tags.update({f"audit.{check}": ok for check, ok in record.dtype_audit["checks"].items()})
        tags.update({f"env.{key}": value for key, value in record.environment.items()})
        self._batch(run_id, params=_flatten(record.config), tags=tags, metrics=metrics, timestamp=stamp)
        # The record as results.jsonl holds it: non-finite values as strings, like every line there.
        self.client.log_dict(run_id, json.loads(record.model_dump_json(exclude={"dtype_audit"})), "record.json")
        if record.dtype_audit:
            self.client.log_dict(run_id, record.dtype_audit, "dtype_audit.json")
        if log_file is not None and log_file.is_file():
            self.client.log_artifact(run_id, str(log_file), "logs")

    def log_summary(self, run_id: str, summary: Sequence[SummaryRow], stamp: str) -> None:
        metrics, tags = [], {}
        for row in summary:
            where = f"{row.workload}/bs{row.batch_size}/{row.precision}"
            metrics += [(f"speedup/{where}", row.speedup, 0), (f"memory_ratio/{where}", row.memory_ratio, 0)]
            if row.parity:
                metrics.append((f"parity_delta/{where}", row.parity.delta, 0))
                tags[f"parity/{where}"] = row.parity.verdict
        metrics = [metric for metric in metrics if metric[1] is not None]
        self._batch(run_id, tags=tags, metrics=metrics, timestamp=_millis(stamp))
        self.client.log_dict(run_id, json_safe([row.as_dict() for row in summary]), "summary.json")

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
        tag_list = [e.RunTag(k, "" if v is None else str(v)) for k, v in (tags or {}).items()]
        metric_list = [e.Metric(k, float(v), stamp, step) for k, v, step in metrics]
        for chunk in _chunks(param_list, MAX_TAGS_PER_CALL):
            self.client.log_batch(run_id, params=chunk)
        for chunk in _chunks(tag_list, MAX_TAGS_PER_CALL):
            self.client.log_batch(run_id, tags=chunk)
        for chunk in _chunks(metric_list, MAX_METRICS_PER_CALL):
            self.client.log_batch(run_id, metrics=chunk)


def matrix_params(config: dict[str, Any]) -> dict[str, Any]:
    """The parent run's params, from the resolved matrix as invocations.jsonl keeps it."""
    params = {key: config.get(key) for key in ("name", "steps", "warmup_steps", "repeats", "seed")}
    params["precisions"] = ",".join(config.get("precisions", []))
    params["workloads"] = ",".join(w.get("label") or w.get("workload", "?") for w in config.get("workloads", []))
    return {("matrix" if key == "name" else key): value for key, value in params.items()}


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
