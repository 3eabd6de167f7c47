"""The cell record and results.jsonl, the record of truth. No torch here.

Each record is self-describing: the resolved cell config, the environment, the measurements and
the status. Lines are appended whole and flushed to disk when a cell ends, so a crash can at
worst leave one truncated last line, which readers skip and writers never extend.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from amp_suite.config import CellSpec

# diverged: the cell ran, but a step produced inf/NaN outside GradScaler's skip-and-retry.
Status = Literal["ok", "skipped", "failed", "diverged"]


class CellRecord(BaseModel):
    # Later versions add fields; reading an older or newer file must not fail on them.
    model_config = ConfigDict(extra="allow")

    cell_id: str
    config_hash: str
    matrix: str
    workload: str
    precision: str
    status: Status
    reason: str | None = None
    device: str
    device_name: str | None = None
    batch_size: int
    steps: int
    warmup_steps: int
    seed: int
    throughput: float | None = Field(None, description="training samples per second, measured steps only")
    step_time_ms_p50: float | None = None
    step_time_ms_p90: float | None = None
    step_time_ms_mean: float | None = None
    step_time_ms_stdev: float | None = None
    peak_memory_mb: float | None = None
    peak_memory_reserved_mb: float | None = None
    peak_memory_kind: str | None = None
    final_loss: float | None = None
    val_metric_name: str | None = Field(None, description="the workload's primary validation metric")
    val_metric: float | None = None
    val_higher_is_better: bool | None = None
    val_loss: float | None = None
    val_metrics: dict[str, float] = Field(default_factory=dict)
    grad_underflow_fraction: float | None = Field(
        None, description="share of fp32 gradients below fp16's smallest subnormal, before training"
    )
    dtype_audit: dict[str, Any] | None = Field(None, description="per-op dtypes of one step (diagnostics.dtype_audit)")
    data_source: str | None = None
    data_fingerprint: str | None = None
    train_samples: int | None = None
    val_samples: int | None = None
    loss_scale: float | None = None
    skipped_steps: int | None = None
    loss_scale_drops: int | None = None
    loss_scale_warning: bool | None = Field(None, description="the scale kept dropping: persistent overflow")
    loss_scale_curve: list[float] = Field(default_factory=list, description="GradScaler's scale after every step")
    nonfinite_step: int | None = Field(None, description="first step (warmup included) with inf/NaN")
    nonfinite_site: str | None = Field(None, description="the module that produced it, found by replay")
    matmul_dtype: str | None = Field(None, description="dtype a matmul produced under the policy")
    fp32_math: dict[str, str] | None = None
    batch_order_hash: str | None = None
    loss_curve: list[float] = Field(default_factory=list, description="loss per measured step")
    started_at: str = ""
    duration_s: float | None = None
    mlflow_run_id: str | None = None
    log_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def for_spec(cls, spec: CellSpec, status: Status, reason: str | None = None, **fields: Any) -> CellRecord:
        return cls(
            cell_id=spec.cell_id,
            config_hash=spec.config_hash,
            matrix=spec.matrix,
            workload=spec.workload.name,
            precision=spec.precision,
            status=status,
            reason=reason,
            device=spec.device,
            batch_size=spec.batch_size,
            steps=spec.steps,
            warmup_steps=spec.warmup_steps,
            seed=spec.seed,
            config=spec.model_dump(mode="json"),
            started_at=fields.pop("started_at", None) or utc_now(),
            **fields,
        )

    @property
    def resume_key(self) -> tuple[str, str]:
        return self.cell_id, self.config_hash


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class ResultsFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: CellRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = record.model_dump_json() + "\n"
        with self.path.open("a+b") as handle:
            if handle.tell() > 0:
                # Never extend a line a crash left unterminated: start a fresh one.
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    line = "\n" + line
            handle.write(line.encode())
            handle.flush()
            os.fsync(handle.fileno())

    def read(self) -> tuple[list[CellRecord], int]:
        """All readable records, and how many lines were unreadable (e.g. cut off by a crash)."""
        if not self.path.exists():
            return [], 0
        records, bad = [], 0
        for line in self.path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                records.append(CellRecord.model_validate(json.loads(line)))
            except (json.JSONDecodeError, ValidationError):
                bad += 1
        return records, bad
