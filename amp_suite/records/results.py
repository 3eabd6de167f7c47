"""The cell record and results.jsonl, the record of truth. No torch here.

Each record stands alone: the resolved cell config, the machine it ran on, the parity rule its
verdicts are judged by, the invocation that produced it, the measurements and the status, so
every summary and report can be recomputed from records alone. Lines are appended whole or not
at all and flushed to disk when a cell ends (`amp_suite.records.jsonl`); readers skip lines they cannot
read and say how many.

The record is closed when written (a misspelt field is an error, not a new key) and lenient
when read (`StoredRecord`): lines from older versions lack fields, newer ones add some.

A record holds any outcome: floats that are not finite (a diverged loss curve) are written as
the JSON strings "NaN", "Infinity" and "-Infinity", and read back as floats.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from amp_suite.config import AUTO_BATCH, CellSpec, ParityConfig, Status
from amp_suite.config.base import MAX_SAMPLES, MAX_STEPS, OK
from amp_suite.records.jsonl import append_line, each_object
from amp_suite.records.machine import Machine, described
from amp_suite.records.schema import declared, fields_of, measured, unit_of
from amp_suite.records.series import Series, series_field

# A series holds at most a point per step a matrix allows (warmup and timed steps, MAX_STEPS each):
# a longer one is a line no record has, and reading it would cost memory without end.
MAX_CURVE_POINTS = 2 * MAX_STEPS


class BatchSearch(BaseModel):
    """What the batch search (amp_suite.execution.batch_search) tried and found; kept in the record of the
    cell measured at `found`."""

    found: int | None  # the largest batch that fitted; None if not even batch 1 did
    limited_by: Literal["memory", "samples"] | None  # what stopped the growth; None if nothing fitted
    probes: list[tuple[int, str]]  # (batch, the probe's status) in the order they ran
    failure: str | None = None  # a probe that failed for another reason than memory ends the search
    skipped: str | None = None  # a skipped probe's reason: no batch runs here, so the cell is skipped


class EvalPoint(BaseModel):
    """One evaluation of the validation set during training (time to target)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")  # a diverged run's metric is NaN

    step: int  # optimizer steps trained, warmup included
    train_s: float  # timed training seconds so far: warmup steps and evaluations are not counted
    metric: float  # the workload's primary validation metric


def first_reaching(curve: list[EvalPoint], target: float, higher_is_better: bool) -> EvalPoint | None:
    """The first evaluation at or past the target (a floor, or a ceiling where lower is better)."""
    return next((p for p in curve if (p.metric >= target if higher_is_better else p.metric <= target)), None)


class TimingStop(BaseModel):
    """How a side-by-side comparison's timing stopped (execution.side_by_side): after the fixed
    schedule, or by the stopping rule, decided or out of budget."""

    model_config = ConfigDict(extra="forbid")

    rule: Literal["sequential", "fixed"]
    stopped: Literal["decided", "budget", "fixed"]
    rounds: int = Field(ge=0)  # timed windows per cell, the schedule's and any past it
    steps: int | None = Field(None, ge=0)  # the steps a cell trained in them (about rounds x the window's)
    seconds: float = Field(ge=0)  # from the first turn to the release
    verdicts: dict[str, Literal["faster", "no gain", "undecided"]] = Field(default_factory=dict, max_length=64)
    decided_at: dict[str, int] = Field(default_factory=dict, max_length=64)  # the round each mode was decided at
    more_rounds: int | None = Field(None, ge=0)  # out of budget: rounds the last interval projects to a decision


class SetAsideWindow(BaseModel):
    """A window of the timed steps left out of the cell's figures, and why."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")  # a window read as NaN keeps its value

    window: int = Field(ge=0)  # its index in throughput_windows
    samples_per_s: float
    reason: str = Field(max_length=500)


class CellRecord(BaseModel):
    # JSON has no NaN or infinity: they travel as strings (the documented dialect of results.jsonl).
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")

    record_id: str | None = Field(None, description="unique per record; what sync matches tracker runs by")
    invocation_id: str | None = Field(None, description="the `amp-suite run` that produced it (invocations.jsonl)")
    cell_id: str
    config_hash: str
    matrix: str
    workload: str
    precision: str
    compile: str = Field("off", description="torch.compile mode of the model ('off': eager)")
    channels_last: bool = Field(False, description="model and inputs in channels_last (NHWC) memory layout")
    status: Status
    reason: str | None = None
    device: str
    device_name: str | None = None
    machine: Machine | None = Field(None, description="device model, software stack and host; None if never probed")
    parity_rule: ParityConfig | None = Field(None, description="the matrix's rule this record's parity is judged by")
    batch_size: int | None = Field(  # a batch never holds more than the training set: the most a matrix allows
        ge=1, le=MAX_SAMPLES, description="the batch measured; with batch_sizes auto, the one found (None: none)"
    )
    batch_search: BatchSearch | None = Field(None, description="batch_sizes auto: the probes and what they found")
    steps: int
    warmup_steps: int
    seed: int
    throughput: float | None = measured("samples/s", "training samples per second, over the timed windows kept")
    # One figure with throughput, from the same windows: throughput x step_time_ms = samples per step.
    step_time_ms: float | None = measured(
        "ms", "the mean training step throughput counts: every device's samples per step / throughput", topic="timing"
    )
    host_cpu_ms_per_step: float | None = measured(
        "ms",
        "CPU time of the cell's process per timed step, every thread (instruments.timers.HostCpuTime); None: DDP",
        topic="timing",
    )
    throughput_windows: list[float] = Field(
        default_factory=list, max_length=MAX_CURVE_POINTS,
        description="samples/s in each window of the timed steps (config.base.window_edges)",
    )  # fmt: skip
    throughput_spread: float | None = Field(
        None, description="(max - min) / median of throughput_windows, those set aside left out"
    )
    noisy: bool | None = Field(None, description="throughput_spread above config.NOISY_SPREAD")
    windows_set_aside: list[SetAsideWindow] = Field(
        default_factory=list, max_length=MAX_CURVE_POINTS,
        description="windows a hiccup hit, left out of throughput, its spread and the speedup's pairs"
        " (instruments.timers.outliers)",
    )  # fmt: skip
    side_by_side_id: str | None = Field(
        None, description="the comparison this cell took turns in, window by window (execution.side_by_side)"
    )
    turn_order: list[str] = Field(
        default_factory=list,
        description="side by side: the cells that took turns, in their first round's order; rounds alternate"
        " with the reverse order, and window i of each is paired with window i of the others",
    )
    untimed_steps: int | None = measured(
        "steps",
        "steps trained among the timed ones but not timed: side by side, each turn's first (cell.windows)",
        topic="timing",
    )
    timing_stop: TimingStop | None = Field(
        None, description="side by side: how the comparison's timing stopped (None: the cell ran alone)"
    )
    ran_alone: str | None = Field(
        None, description="why this cell was timed alone, one after another, though its comparison has others"
    )
    flops_per_step: int | None = measured("FLOP", "forward + backward FLOPs of one batch (FlopCounterMode)")
    matmul_flop_share: float | None = measured(
        "fraction",
        "share of a step's arithmetic (FLOPs, elementwise ops counted one per output element) in matmuls,"
        " convolutions and attention: FlopCounterMode's count over all; on the diagnostics micro-batch",
    )
    host_syncs_per_step: int | None = measured(
        "syncs",
        "times one training step made the host wait for the device (fp16's GradScaler: 1; 0 with a fused optimizer)",
        topic="timing",
    )
    gpu_busy_ms_per_step: float | None = measured(
        "ms",
        "the GPU's own work per step: the union of its kernels', copies' and fills' intervals on the device"
        " timeline, over warmup steps traced with CUPTI (instruments.diagnostics.gpu_work); None off a GPU",
        topic="timing",
    )
    gpu_idle_fraction: float | None = measured(
        "fraction", "share of the timed steps' mean step the GPU sat idle: 1 - gpu_busy_ms_per_step / that step",
        topic="timing",
    )
    kernel_ms_per_step: float | None = measured(
        "ms",
        "a kernel benchmark's time per iteration: the sum of its device work's durations under torch.profiler"
        " (cell.float8_benchmark); on a CPU, its ops' CPU times. None: a training cell",
        topic="timing",
    )
    tflops: float | None = measured("TFLOP/s", "achieved TFLOP/s over the measured steps")
    peak_tflops: float | None = Field(None, description="the GPU's dense datasheet peak for this math mode")
    mfu: float | None = measured(
        "fraction", "tflops / (peak_tflops x the cell's GPUs, a DDP cell's world size); None off a known peak"
    )
    warmup_s: float | None = measured(
        "s", "wall time of the warmup steps (torch.compile compiles in them)", topic="timing"
    )
    settled_after_steps: int | None = measured(
        "steps",
        "where the step time settled: the warmup steps, and the timed steps of the first windows set aside as"
        " still warming up (instruments.timers.still_warming; at most half the windows)",
        topic="timing",
    )
    energy_j: float | None = measured(
        "J", "GPU energy over the timed steps (NVML counter delta)", instrument="gpu_state", topic="GPU"
    )
    energy_j_per_sample: float | None = measured("J", instrument="gpu_state", topic="GPU")
    power_w: float | None = measured(
        "W", "average GPU power over the timed steps: energy / wall time", instrument="gpu_state", topic="GPU"
    )
    sm_clock_mhz_start: int | None = measured(
        "MHz", "SM clock as the timed steps began (NVML)", instrument="gpu_state", topic="GPU"
    )
    sm_clock_mhz_end: int | None = measured("MHz", instrument="gpu_state", topic="GPU")
    temperature_c_start: int | None = measured(
        "°C", "GPU die temperature as the timed steps began", instrument="gpu_state", topic="GPU"
    )
    temperature_c_end: int | None = measured("°C", instrument="gpu_state", topic="GPU")
    throttle_reasons: list[str] | None = declared(
        "diagnostic", "slowdowns NVML reported during the timed steps", instrument="gpu_state"
    )
    throttled: bool | None = declared(
        "diagnostic", "the GPU ran below its clocks for power or heat while timed", instrument="gpu_state"
    )
    gpu_state_note: str | None = declared(
        "diagnostic", "which GPU readings were unavailable, and why", instrument="gpu_state"
    )
    step_time_ms_p50: float | None = measured(
        "ms", "median of every timed step, set-aside windows' too (DDP: rank 0's, gradients synced)", topic="timing"
    )
    step_time_ms_p90: float | None = measured("ms", topic="timing")
    step_time_ms_mean: float | None = measured("ms", topic="timing")
    step_time_ms_stdev: float | None = measured("ms", topic="timing")
    world_size: int | None = measured("ranks", "DDP: ranks, one device each (None: not data-parallel)", topic="scaling")
    comm_hook: str | None = Field(None, description="DDP gradient compression: none (float32 all-reduce), fp16, bf16")
    ddp_backend: str | None = Field(None, description="DDP process group backend: nccl (GPUs) or gloo (CPU)")
    rank_threads: int | None = Field(None, description="DDP on a CPU: intra-op threads per rank (the cores, shared)")
    step_time_ms_no_sync_p50: float | None = measured(
        "ms", "DDP: median step of the same batches inside no_sync() (no gradient all-reduce)", topic="scaling"
    )
    step_time_ms_no_sync_mean: float | None = measured("ms", topic="scaling")
    comm_share_raw: float | None = measured(
        "fraction", "DDP: 1 - step_time_ms_no_sync_p50 / step_time_ms_p50 (negative: within noise)", topic="scaling"
    )
    comm_share: float | None = measured(
        "fraction", "DDP: comm_share_raw clipped at 0: the step's share spent communicating", topic="scaling"
    )
    rank_step_time_ms_p50: list[float] = Field(default_factory=list, description="DDP: each rank's median synced step")
    peak_memory_mb: float | None = measured("MB", instrument="memory", topic="memory")
    peak_memory_reserved_mb: float | None = measured("MB", instrument="memory", topic="memory")
    peak_memory_kind: str | None = declared(
        "diagnostic", "which peak: the CUDA allocator's or the resident set's", instrument="memory"
    )
    device_memory_mb: float | None = Field(None, description="the GPU's total memory; recorded when a cell hits oom")
    final_loss: float | None = measured("", topic="accuracy")
    val_metric_name: str | None = Field(None, description="the workload's primary validation metric")
    val_metric: float | None = measured("", topic="accuracy")
    val_higher_is_better: bool | None = None
    val_metric_chance: float | None = Field(
        None, description="val_metric of a model that learned only the labels' frequencies (None: unknown)"
    )
    val_loss: float | None = measured("", topic="accuracy")
    val_metrics: dict[str, float] = Field(default_factory=dict)
    eval_every: int | None = Field(None, description="time to target: steps between evaluations (None: at the end)")
    eval_curve: list[EvalPoint] = Field(
        default_factory=list, max_length=MAX_CURVE_POINTS,
        description="time to target: the primary metric at each evaluation, the last at the end",
    )  # fmt: skip
    eval_s: float | None = measured(
        "s",
        "wall time of the evaluations added for time to target: outside the timed steps and all rates",
        topic="accuracy",
    )
    target: float | None = Field(None, description="the declared target for val_metric (None: none declared)")
    steps_to_target: int | None = measured(
        "steps",
        "optimizer steps (warmup included) to the first evaluation at the declared target; None: not reached",
        topic="accuracy",
    )
    time_to_target_s: float | None = measured(
        "s", "timed training seconds to that evaluation: warmup steps and evaluations excluded", topic="accuracy"
    )
    grad_underflow_fraction: float | None = measured(
        "fraction", "share of fp32 gradients below fp16's smallest subnormal, before training", topic="precision"
    )
    dtype_audit: dict[str, Any] | None = Field(None, description="per-op dtypes of one step (diagnostics.dtype_audit)")
    diagnostics_batch_size: int | None = Field(
        None, description="the micro-batch the step diagnostics ran on (underflow, dtype audit, FLOPs; pipeline.py)"
    )
    data_source: str | None = None
    data_fingerprint: str | None = None
    train_samples: int | None = None
    val_samples: int | None = None
    loss_scale: float | None = measured("", topic="precision")
    skipped_steps: int | None = measured("steps", topic="precision")
    loss_scale_drops: int | None = measured("drops", topic="precision")
    loss_scale_warning: bool | None = Field(None, description="the scale kept dropping: persistent overflow")
    loss_scale_curve: list[float] = Field(
        default_factory=list, max_length=MAX_CURVE_POINTS, description="GradScaler's scale after every step"
    )
    nonfinite_step: int | None = Field(None, description="first step (warmup included) with inf/NaN")
    nonfinite_site: str | None = Field(None, description="the module that produced it, found by replay")
    matmul_dtype: str | None = Field(
        None, description="dtype a matmul produced under the policy (fp8: its float8 operands' dtype)"
    )
    fp8_layers: int | None = measured("layers", "fp8: linear layers trained as torchao Float8Linear", topic="precision")
    fp8_layers_left_out: list[str] = Field(
        default_factory=list, description="fp8: linear layers left in bf16 (sizes not multiples of 16)"
    )
    fp32_math: dict[str, str] | None = None
    batch_order_hash: str | None = None
    loss_curve: list[float] = Field(
        default_factory=list, max_length=MAX_CURVE_POINTS, description="loss per measured step"
    )
    started_at: str = ""
    duration_s: float | None = measured("s", topic="timing")
    tracker_run_id: str | None = Field(None, description="the tracker's run mirroring this record (MLflow's run id)")
    log_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ok_means_measured(self) -> CellRecord:
        """An ok cell measured what it says: finite numbers, no amount (a time, a size, a rate, a
        count) below zero, a positive rate. A hand-edited line or a broken instrument would
        otherwise print as a result ("acc inf", -5 MB) and turn every ratio built on it into nonsense."""
        if self.status != OK:
            return self
        for name in _MEASURED:
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and (value >= 0 or _SIGNED[name])):
                raise ValueError(f"status ok with {name} {value}: no cell measures that")
        rate = self.throughput
        if rate is not None and rate <= 0:
            raise ValueError(f"status ok with throughput {rate}: an ok cell has a positive, finite rate")
        return self

    @classmethod
    def for_spec(cls, spec: CellSpec, status: Status, reason: str | None = None, **fields: Any) -> CellRecord:
        return cls(
            cell_id=spec.cell_id,
            config_hash=spec.config_hash,
            matrix=spec.matrix,
            workload=spec.workload.name,
            precision=spec.precision,
            compile=spec.compile,
            channels_last=spec.channels_last,
            status=status,
            reason=reason,
            device=spec.device,
            batch_size=None if spec.batch_size == AUTO_BATCH else spec.batch_size,
            steps=spec.steps,
            warmup_steps=spec.warmup_steps,
            seed=spec.seed,
            **_ddp_identity(spec),
            config=spec.model_dump(mode="json"),
            started_at=fields.pop("started_at", None) or utc_now(),
            **fields,
        )

    def updated(self, **fields: Any) -> CellRecord:
        """A copy with these fields changed, validated as a new record is: a misspelt field or a
        wrong type is an error (pydantic's model_copy(update=...) would drop or keep it silently)."""
        unknown = sorted(set(fields) - set(CellRecord.model_fields))
        if unknown:
            raise ValueError(f"not fields of a cell record: {', '.join(unknown)}")
        return type(self).model_validate({**dict(self), **fields})

    @property
    def resume_key(self) -> tuple[str, str]:
        return self.cell_id, self.config_hash

    @property
    def identity(self) -> str:
        """record_id, or for records written before it existed, a stable stand-in."""
        if self.record_id:
            return self.record_id
        return hashlib.sha256(f"{self.cell_id} {self.config_hash} {self.started_at}".encode()).hexdigest()[:16]


# What _ok_means_measured checks: every measured quantity, and which may be negative (a loss or a
# score, a fraction such as comm_share_raw, where below zero means within noise, a temperature).
_MEASURED = fields_of(CellRecord, role="measured")
_SIGNED = {name: unit_of(CellRecord, name) in ("", "fraction", "°C") for name in _MEASURED}


CurveSeries = series_field(MAX_CURVE_POINTS)


class StoredRecord(CellRecord):
    """A record read back from a file or a store. Lines from other versions are read, not
    rejected: fields this version does not know are kept, missing ones take their defaults, and
    a line older than the machine field gets one rebuilt from its environment block. Its per-step
    series are held as C doubles, a quarter of a list's memory (amp_suite.records.series)."""

    model_config = ConfigDict(extra="allow")

    loss_curve: CurveSeries = Field(default_factory=Series, description="loss per measured step")
    loss_scale_curve: CurveSeries = Field(default_factory=Series, description="GradScaler's scale after every step")

    @model_validator(mode="before")
    @classmethod
    def _from_older_versions(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = _layout_from_workload(data)
        if "mlflow_run_id" in data:  # before trackers were chosen by URI, the field named its one tracker
            data = dict(data)
            data.setdefault("tracker_run_id", data.pop("mlflow_run_id"))
        machine = data.get("machine")
        environment = data.get("environment") if isinstance(data.get("environment"), dict) else {}
        if isinstance(machine, dict):  # a newer version's machine may say more than this one knows
            machine = {k: v for k, v in machine.items() if k in Machine.model_fields}
            machine = described(str(machine.get("device_type"))).completed(machine, environment)
            data = {**data, "machine": machine}
        elif machine is None and isinstance(data.get("environment"), dict):
            data = {**data, "machine": Machine.from_environment(str(data.get("device", "")), data["environment"])}
        return data

    @model_validator(mode="after")
    def _windows_no_cell_measures(self) -> StoredRecord:
        """A window that is not a positive, finite rate (NaN, infinity, 0, below 0: a hand-edited line,
        a broken instrument) is set aside as it is read, as a hiccup's window is: left out of the
        record's figures, its spread and its speedup's pairs, and listed with the reason wherever
        set-aside windows are (summary, report, predict). The record's other windows still count."""
        aside = {window.window for window in self.windows_set_aside}
        unmeasured = [
            SetAsideWindow(window=index, samples_per_s=rate, reason=_unmeasured_reason(rate))
            for index, rate in enumerate(self.throughput_windows)
            if index not in aside and not (math.isfinite(rate) and rate > 0)
        ]
        if unmeasured:
            self.windows_set_aside = [*self.windows_set_aside, *unmeasured]
        return self


def _unmeasured_reason(rate: float) -> str:
    shown = "NaN" if math.isnan(rate) else f"{rate:g}"
    return f"not a positive, finite rate ({shown} samples/s): no timed window measures that; left out as read"


def _layout_from_workload(data: dict[str, Any]) -> dict[str, Any]:
    """Before the memory layout was a matrix axis, a ResNet config carried it as workload.channels_last."""
    config = data.get("config")
    workload = config.get("workload") if isinstance(config, dict) else None
    if "channels_last" in data or not isinstance(workload, dict) or not isinstance(workload.get("channels_last"), bool):
        return data
    layout = workload["channels_last"]
    return {**data, "channels_last": layout, "config": {**config, "channels_last": layout}}


def _ddp_identity(spec: CellSpec) -> dict[str, Any]:
    """A DDP cell's axes as top-level fields (filtering and MLflow columns); nothing for other cells."""
    if spec.ddp is None:
        return {}
    return {"world_size": spec.ddp.world_size, "comm_hook": spec.ddp.comm_hook}


class DistinctRecords:
    """Records one per identity, in the order first seen. A line copied twice (a folder and the
    server it was synced to, a file concatenated twice) is one record, `repeated`; a line that
    reuses another's record_id with other content (hand-edited) is not that record, so only the
    first is kept and the later ones counted `conflicting`."""

    def __init__(self) -> None:
        self.records: list[CellRecord] = []
        self.repeated = 0
        self.conflicting = 0
        self._first: dict[str, CellRecord] = {}

    def add(self, records: list[CellRecord]) -> None:
        for record in records:
            earlier = self._first.setdefault(record.identity, record)
            if earlier is record:
                self.records.append(record)
            elif earlier.model_dump_json() == record.model_dump_json():  # as written: a NaN equals itself
                self.repeated += 1
            else:
                self.conflicting += 1


def describe_error(exc: BaseException, limit: int = 300) -> str:
    """An exception as one bounded line for a record or a message; tracebacks go to logs."""
    lines = str(exc).strip().splitlines()
    if isinstance(exc, ValidationError) and exc.errors():  # its first line only counts the errors
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        lines = [(f"{where}: " if where else "") + first["msg"].removeprefix("Value error, ")]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:limit]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class ResultsFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: CellRecord) -> None:
        """Raises jsonl.LineWriteError (with the file unchanged) when the line can't be written."""
        append_line(self.path, record.model_dump_json())

    def read(self) -> tuple[list[CellRecord], int]:
        """All readable records, and how many lines were unreadable (cut off, not UTF-8, not a record).
        Each line is parsed and validated before the next is read, so memory holds the records and
        one line, never the file's parsed lines besides."""
        records: list[CellRecord] = []
        unreadable = 0
        for data in each_object(self.path):
            try:
                records.append(StoredRecord.model_validate(data))
            except ValidationError:
                unreadable += 1
        return records, unreadable
