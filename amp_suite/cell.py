"""Run one CellSpec: hardware check, build, warm up, measure, and describe it as a CellRecord."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from amp_suite import environment
from amp_suite.config import CellSpec
from amp_suite.data import DeviceBatches, batch_order, order_hash
from amp_suite.diagnostics.underflow import grad_underflow_fraction
from amp_suite.hardware import probe
from amp_suite.loop import Trainer
from amp_suite.measure import PeakMemory, make_step_timer, step_stats
from amp_suite.precision import PrecisionPolicy, make_policy, observed_matmul_dtype
from amp_suite.results import CellRecord, utc_now
from amp_suite.workloads import build_workload

# progress(phase, steps done, steps in phase)
Progress = Callable[[str, int, int], None]


def _no_progress(phase: str, done: int, total: int) -> None:
    pass


def run_cell(spec: CellSpec, progress: Progress = _no_progress) -> CellRecord:
    """Never raises for a cell's own failure: it comes back as status "failed" with the error."""
    started, clock = utc_now(), time.perf_counter()
    device = torch.device(spec.device)
    fields: dict[str, Any] = {"started_at": started}
    try:
        caps = probe(device)
        fields.update(device_name=caps.name, environment=environment.collect(device, caps))
        policy = make_policy(spec.precision, device.type)
        unsupported = policy.unsupported_reason(caps)
        if unsupported and not spec.force:
            return CellRecord.for_spec(spec, "skipped", unsupported, **fields)
        fields.update(measure(spec, policy, device, progress))
        reason = f"forced despite: {unsupported}" if unsupported else None
        return CellRecord.for_spec(spec, "ok", reason, duration_s=time.perf_counter() - clock, **fields)
    except Exception as exc:  # a failing cell is recorded and the matrix goes on
        traceback.print_exc()  # to the cell's log; the record gets one line
        return CellRecord.for_spec(spec, "failed", describe(exc), duration_s=time.perf_counter() - clock, **fields)


def measure(spec: CellSpec, policy: PrecisionPolicy, device: torch.device, progress: Progress) -> dict[str, Any]:
    with policy.numerics() as fp32_math, cudnn_autotune(device):
        workload = build_workload(spec.workload)
        data = workload.load_data()
        torch.manual_seed(spec.seed)  # same initial weights for every precision
        model = workload.to_device(workload.build_model(data.train), device)
        data = data.to(device)
        optimizer = workload.make_optimizer(model)
        policy.bind(optimizer)
        matmul_dtype = observed_matmul_dtype(policy, device)
        if matmul_dtype != policy.compute_dtype:
            raise RuntimeError(f"{policy.name} expected matmuls in {policy.compute_dtype}, got {matmul_dtype}")

        order = batch_order(len(data.train), spec.batch_size, spec.warmup_steps + spec.steps, spec.seed)
        batches = DeviceBatches(data.train, order)
        underflow = grad_underflow_fraction(model, workload.loss, *batches.peek())
        trainer = Trainer(model, optimizer, policy, workload, spec.max_grad_norm)
        trainer.run(batches, spec.warmup_steps, on_step=lambda n: progress("warmup", n, spec.warmup_steps))
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # warmup work must not spill into the measured region

        timer = make_step_timer(device, spec.steps)
        with PeakMemory(device) as memory:
            losses = trainer.run(batches, spec.steps, timer, lambda n: progress("measure", n, spec.steps))
            times_ms, span_s = timer.read()  # synchronises once
        stats = step_stats(times_ms)
        loss_curve = losses.float().cpu().tolist()  # device -> host copy, after the timed region
        progress("evaluate", 0, 1)
        validation = workload.evaluate(model, data.validation, spec.batch_size, policy.forward_context)
    return {
        "throughput": spec.batch_size * spec.steps / span_s,
        "step_time_ms_p50": stats.p50_ms,
        "step_time_ms_p90": stats.p90_ms,
        "step_time_ms_mean": stats.mean_ms,
        "step_time_ms_stdev": stats.stdev_ms,
        "peak_memory_mb": memory.peak_mb,
        "peak_memory_reserved_mb": memory.reserved_mb,
        "peak_memory_kind": memory.kind,
        "final_loss": loss_curve[-1],
        "loss_curve": loss_curve,
        "val_metric_name": workload.primary_metric,
        "val_metric": validation[workload.primary_metric],
        "val_higher_is_better": workload.higher_is_better,
        "val_metrics": validation,
        "val_loss": validation["val_loss"],
        "grad_underflow_fraction": underflow,
        "data_source": data.source,
        "data_fingerprint": data.fingerprint,
        "train_samples": len(data.train),
        "val_samples": len(data.validation),
        "matmul_dtype": str(matmul_dtype).removeprefix("torch."),
        "fp32_math": fp32_math,
        "batch_order_hash": order_hash(order),
        **policy.telemetry(),
    }


@contextmanager
def cudnn_autotune(device: torch.device) -> Iterator[None]:
    """Let cuDNN pick its fastest conv algorithms (during warmup), as tuned training runs do."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = device.type == "cuda"
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def describe(exc: BaseException) -> str:
    """One line for the record; the full traceback goes to the cell's log."""
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
    return text[:500]
