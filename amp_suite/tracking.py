"""MLflow mirror of results.jsonl: one experiment per matrix, a parent run per invocation, and a
nested child run per cell. Written with MlflowClient (no global "active run" state), after each
cell's timed region, in batches.

results.jsonl is the record of truth: a tracking failure during the matrix is reported and the
matrix goes on; only a store that can't be reached at the start stops the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from amp_suite.config import CellSpec, Matrix
from amp_suite.results import CellRecord

METRIC_FIELDS = (
    "throughput",
    "step_time_ms_p50",
    "step_time_ms_p90",
    "step_time_ms_mean",
    "step_time_ms_stdev",
    "peak_memory_mb",
    "peak_memory_reserved_mb",
    "final_loss",
    "val_metric",
    "val_loss",
    "grad_underflow_fraction",
    "loss_scale",
    "skipped_steps",
    "loss_scale_drops",
    "duration_s",
)
RUN_STATUS = {"ok": "FINISHED", "skipped": "FINISHED", "failed": "FAILED", "diverged": "FAILED"}
BATCH = 1000  # MLflow accepts at most 1000 metrics in one log_batch call


class TrackingError(RuntimeError):
    pass


def embedded_store_uri(out_dir: Path) -> str:
    return f"sqlite:///{(out_dir / 'mlflow.db').resolve()}"


class MlflowTracker:
    def __init__(self, tracking_uri: str, warn: Callable[[str], None], artifact_root: Path | None = None) -> None:
        try:
            from mlflow import MlflowClient, entities
        except ImportError as exc:
            raise TrackingError(f"MLflow is not installed: pip install mlflow ({exc})") from exc
        self._entities = entities
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # schema-migration chatter
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        self.artifact_root = artifact_root
        self.warn = warn
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None

    def start(self, matrix: Matrix, experiment: str, matrix_text: str) -> str:
        """Create (or reuse) the experiment and open the parent run; fails loudly if unreachable."""
        try:
            found = self.client.get_experiment_by_name(experiment)
            if found is None:
                location = self.artifact_root.resolve().as_uri() if self.artifact_root else None
                self.experiment_id = self.client.create_experiment(experiment, artifact_location=location)
            else:
                self.experiment_id = found.experiment_id
            run = self.client.create_run(self.experiment_id, run_name=f"{matrix.name}-{time.strftime('%Y%m%d-%H%M%S')}")
        except Exception as exc:
            raise TrackingError(f"MLflow store {self.tracking_uri} is not usable: {_one_line(exc)}") from exc
        self.parent_run_id = run.info.run_id
        self._guard("matrix parameters", self._log_matrix, matrix, matrix_text)
        return self.parent_run_id

    def start_cell(self, spec: CellSpec) -> str | None:
        def create() -> str:
            tags = {"mlflow.parentRunId": self.parent_run_id, "cell_id": spec.cell_id}
            return self.client.create_run(self.experiment_id, run_name=spec.cell_id, tags=tags).info.run_id

        return self._guard(f"a run for {spec.cell_id}", create)

    def finish_cell(self, run_id: str | None, record: CellRecord) -> None:
        if run_id is not None:
            self._guard(f"the results of {record.cell_id}", self._log_cell, run_id, record)

    def finish(self, summary: Sequence[dict[str, Any]], status: str = "FINISHED") -> None:
        if self.parent_run_id is None:
            return
        metrics, tags = [], {}
        for row in summary:
            where = f"{row['workload']}/bs{row['batch_size']}/{row['precision']}"
            metrics += [(f"{key}/{where}", row[key]) for key in ("speedup", "memory_ratio") if row[key] is not None]
            if row["parity"]:
                metrics.append((f"parity_delta/{where}", row["parity"]["delta"]))
                tags[f"parity/{where}"] = row["parity"]["verdict"]
        self._guard("the summary", self._log_summary, summary, metrics, tags)
        self._guard("the parent run's status", self.client.set_terminated, self.parent_run_id, status)

    def abort(self, run_id: str | None) -> None:
        """Mark runs KILLED after an interruption, so nothing is left RUNNING."""
        for run in (run_id, self.parent_run_id):
            if run is not None:
                self._guard("the interrupted run's status", self.client.set_terminated, run, "KILLED")

    # -- logging helpers -------------------------------------------------------------------

    def _log_matrix(self, matrix: Matrix, matrix_text: str) -> None:
        params = {
            "matrix": matrix.name,
            "steps": matrix.steps,
            "warmup_steps": matrix.warmup_steps,
            "repeats": matrix.repeats,
            "seed": matrix.seed,
            "precisions": ",".join(matrix.precisions),
            "workloads": ",".join(w.name for w in matrix.workloads),
        }
        self._batch(self.parent_run_id, params=params)
        self.client.log_text(self.parent_run_id, matrix_text, "matrix.yaml")

    def _log_cell(self, run_id: str, record: CellRecord) -> None:
        now = int(time.time() * 1000)
        metrics = [(key, getattr(record, key), 0) for key in METRIC_FIELDS if getattr(record, key) is not None]
        metrics += [(key, value, 0) for key, value in record.val_metrics.items() if key not in METRIC_FIELDS]
        first_step = record.warmup_steps
        metrics += [("train_loss", loss, first_step + i) for i, loss in enumerate(record.loss_curve)]
        metrics += [("loss_scale_series", scale, step) for step, scale in enumerate(record.loss_scale_curve)]
        tags = {"status": record.status, "reason": record.reason or "", "cell_id": record.cell_id}
        if record.loss_scale_warning is not None:
            tags["loss_scale_warning"] = record.loss_scale_warning
        if record.dtype_audit:
            tags.update({f"audit.{check}": ok for check, ok in record.dtype_audit["checks"].items()})
        tags.update({f"env.{key}": value for key, value in record.environment.items()})
        self._batch(run_id, params=_flatten(record.config), tags=tags, metrics=metrics, timestamp=now)
        self.client.log_dict(run_id, record.model_dump(mode="json", exclude={"dtype_audit"}), "record.json")
        if record.dtype_audit:
            self.client.log_dict(run_id, record.dtype_audit, "dtype_audit.json")
        if record.log_path and Path(record.log_path).is_file():
            self.client.log_artifact(run_id, record.log_path, "logs")
        self.client.set_terminated(run_id, RUN_STATUS[record.status])

    def _log_summary(self, summary: Sequence[dict[str, Any]], metrics: list[tuple[str, float]], tags: dict) -> None:
        self._batch(self.parent_run_id, tags=tags, metrics=[(key, value, 0) for key, value in metrics])
        self.client.log_dict(self.parent_run_id, list(summary), "summary.json")

    def _batch(self, run_id, params=None, tags=None, metrics=(), timestamp=None) -> None:
        e = self._entities
        stamp = timestamp or int(time.time() * 1000)
        param_list = [e.Param(k, str(v)) for k, v in (params or {}).items()]
        tag_list = [e.RunTag(k, "" if v is None else str(v)) for k, v in (tags or {}).items()]
        metric_list = [e.Metric(k, float(v), stamp, step) for k, v, step in metrics]
        for chunk in _chunks(param_list, 100):
            self.client.log_batch(run_id, params=chunk)
        for chunk in _chunks(tag_list, 100):
            self.client.log_batch(run_id, tags=chunk)
        for chunk in _chunks(metric_list, BATCH):
            self.client.log_batch(run_id, metrics=chunk)

    def _guard(self, what: str, action: Callable[..., Any], *args: Any) -> Any:
        try:
            return action(*args)
        except Exception as exc:  # results.jsonl already holds the record; say so and go on
            self.warn(f"MLflow: could not log {what}: {_one_line(exc)} (results.jsonl has it)")
            return None


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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
