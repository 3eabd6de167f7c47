"""Run one CellSpec: hardware check, build, warm up, measure, evaluate, describe it as a CellRecord."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from amp_suite import compilation, environment
from amp_suite.config import CellSpec
from amp_suite.data import DeviceBatches, batch_order, order_hash
from amp_suite.diagnostics.dtype_audit import audit_step
from amp_suite.diagnostics.flops import count_step_flops
from amp_suite.diagnostics.host_syncs import count_host_syncs
from amp_suite.diagnostics.nonfinite import first_nonfinite_step, first_site, watch_nonfinite
from amp_suite.diagnostics.underflow import grad_underflow_fraction
from amp_suite.gpu_state import GpuState
from amp_suite.hardware import probe
from amp_suite.loop import Trainer
from amp_suite.machine import Machine
from amp_suite.measure import (
    HostCpuTime,
    PeakMemory,
    Spread,
    StepStats,
    make_step_timer,
    memory_at_oom,
    release_cached_blocks,
    step_stats,
)
from amp_suite.peaks import utilisation
from amp_suite.precision import PrecisionPolicy, make_policy, observed_matmul_dtype
from amp_suite.results import CellRecord, describe_error, utc_now
from amp_suite.workloads import Workload, build_workload
from amp_suite.workloads.base import LoadedData

# progress(phase, steps done, steps in phase)
Progress = Callable[[str, int, int], None]
Probed = Callable[[dict[str, Any]], None]  # the record fields that say where the cell runs
Curves = tuple[torch.Tensor, torch.Tensor]  # (losses, gradient norms) from Trainer.run
DIAGNOSTIC_PARTS = 4  # the step diagnostics run on micro-batches of a quarter of the batch (step_diagnostics)


def no_progress(phase: str, done: int, total: int) -> None:
    pass


def run_cell(spec: CellSpec, progress: Progress = no_progress, probed: Probed | None = None) -> CellRecord:
    """Never raises for a cell's own failure: it comes back as status "failed" with the error, or
    "oom" when the batch did not fit in device memory. `probed` is told the machine as soon as it
    is known, so that a cell killed later is still recorded under the machine it ran on."""
    started, clock = utc_now(), time.perf_counter()
    device = torch.device(spec.device)
    fields: dict[str, Any] = {"started_at": started}
    try:
        caps = probe(device)
        env = environment.collect(device, caps)
        fields.update(device_name=caps.name, environment=env, machine=Machine.describe(caps, env))
        if probed is not None:
            probed({"device_name": caps.name, "environment": env, "machine": fields["machine"].model_dump(mode="json")})
        impossible = unsupported_axes(spec, device)  # not a matter of speed: --force can't run these
        if impossible:
            return CellRecord.for_spec(spec, "skipped", impossible, **fields)
        policy = make_policy(spec.precision, device.type)  # for the check and the global numerics
        unsupported = policy.unsupported_reason(caps)
        if unsupported and not spec.force:
            return CellRecord.for_spec(spec, "skipped", unsupported, **fields)
        with policy.numerics() as fp32_math, cudnn_autotune(device):
            fields.update(_measure_for(spec)(spec, device, progress), fp32_math=fp32_math)
        fields.update(utilisation(caps.type, caps.name, spec.precision, fields["tflops"], spec.gpus))
        status, reason = "ok", f"forced despite: {unsupported}" if unsupported else None
        if fields.get("nonfinite_step") is not None:
            status, reason = "diverged", fields["nonfinite_site"]
        return CellRecord.for_spec(spec, status, reason, duration_s=time.perf_counter() - clock, **fields)
    except torch.OutOfMemoryError as exc:  # a batch that does not fit is a result, with the memory figures
        traceback.print_exc()
        fields.update(memory_at_oom(device, exc))
        reason = f"out of memory at batch {spec.batch_size}: {describe_error(exc, limit=400)}"
        return CellRecord.for_spec(spec, "oom", reason, duration_s=time.perf_counter() - clock, **fields)
    except Exception as exc:  # a failing cell is recorded and the matrix goes on
        traceback.print_exc()  # to the cell's log; the record gets one line
        reason = describe_error(exc, limit=500)
        return CellRecord.for_spec(spec, "failed", reason, duration_s=time.perf_counter() - clock, **fields)


def unsupported_axes(spec: CellSpec, device: torch.device) -> str | None:
    """Why this cell's compile mode or memory layout can't run here (platform or model), or None."""
    if spec.channels_last and not spec.workload.image_inputs:
        return f"channels_last applies to image inputs; the {spec.workload.workload} workload has none"
    if spec.ddp is not None:
        from amp_suite.ddp import launch

        return compilation.unsupported_reason(device, spec.compile) or launch.unsupported_reason(spec, device)
    return compilation.unsupported_reason(device, spec.compile)


def _measure_for(spec: CellSpec) -> Callable[[CellSpec, torch.device, Progress], dict[str, Any]]:
    """A data-parallel cell is measured by its ranks, each a process of its own (amp_suite.ddp)."""
    if spec.ddp is None:
        return measure
    from amp_suite.ddp.launch import measure_ddp

    return measure_ddp


@dataclass
class Session:
    """Everything one training run needs, built the same way every time for a given spec."""

    workload: Workload
    data: LoadedData
    model: nn.Module  # eager; trainer.model is its compiled form when the cell compiles
    policy: PrecisionPolicy
    trainer: Trainer
    batches: DeviceBatches


def prepare(spec: CellSpec, device: torch.device) -> Session:
    workload = build_workload(spec.workload, spec.channels_last)
    data = workload.load_data()
    if spec.batch_size > len(data.train):  # `samples` only caps real data: digits has 1,437 to train on
        raise ValueError(f"batch {spec.batch_size} is larger than the training set ({len(data.train)} samples)")
    torch.manual_seed(spec.seed)  # same initial weights for every precision
    model = workload.to_device(workload.build_model(data.train), device)
    data = data.to(device, workload.memory_format)
    optimizer = workload.make_optimizer(model)
    policy = make_policy(spec.precision, device.type)
    policy.bind(optimizer)
    order = batch_order(len(data.train), spec.batch_size, spec.warmup_steps + spec.steps, spec.seed)
    trainer = Trainer(
        compilation.compiled(model, spec.compile), optimizer, policy, workload, spec.max_grad_norm,
        keep=compilation.kept_output(spec.compile),
    )  # fmt: skip
    return Session(workload, data, model, policy, trainer, DeviceBatches(data.train, order))


def measure(spec: CellSpec, device: torch.device, progress: Progress) -> dict[str, Any]:
    session = prepare(spec, device)
    policy, trainer, batches, model = session.policy, session.trainer, session.batches, session.model
    matmul_dtype = observed_matmul_dtype(policy, device)
    if matmul_dtype != policy.compute_dtype:
        raise RuntimeError(f"{policy.name} expected matmuls in {policy.compute_dtype}, got {matmul_dtype}")
    # The diagnostics run the eager model: the same arithmetic, and nothing for the compiler to trace.
    diagnostics = step_diagnostics(model, session.workload.loss, policy, batches)
    flops = diagnostics["flops_per_step"]
    # Their fp32 backward and model copies leave blocks in the allocator's cache; released, the
    # reserved-memory peak of the timed steps is the training's own.
    release_cached_blocks(device)

    warmup, host_syncs, warmup_s = warm_up(trainer, batches, spec, device, progress)
    timer = make_step_timer(device, spec.steps)
    with PeakMemory(device) as memory, GpuState(device) as gpu, HostCpuTime() as host_cpu:
        measured = trainer.run(batches, spec.steps, timer, lambda n: progress("measure", n, spec.steps))
        times_ms, span_s = timer.read()  # synchronises once
    stats = step_stats(times_ms)
    spread = Spread.of(times_ms, spec.batch_size)
    loss_curve = measured[0].float().cpu().tolist()  # device -> host copy, after the timed region
    progress("evaluate", 0, 1)
    # The eager module holds the trained weights too; evaluating it spares a recompile for eval mode
    # and for the last, smaller batch.
    validation = session.workload.evaluate(model, session.data.validation, spec.batch_size, policy.forward_context)
    return {
        **diagnostics,
        "throughput": spec.batch_size * spec.steps / span_s,
        "host_cpu_ms_per_step": host_cpu.seconds * 1e3 / spec.steps,
        "warmup_s": warmup_s,
        "host_syncs_per_step": host_syncs,
        "tflops": flops * spec.steps / span_s / 1e12,
        **timed_fields(stats, spread, memory),
        **trained_fields(session, loss_curve, validation),
        "matmul_dtype": str(matmul_dtype).removeprefix("torch."),
        "batch_order_hash": order_hash(batches.order.cpu()),
        **gpu.fields(spec.batch_size * spec.steps),
        **policy.telemetry(),
        **check_finite(spec, device, policy, warmup, measured, progress),
    }


def step_diagnostics(model: nn.Module, loss, policy: PrecisionPolicy, batches: DeviceBatches) -> dict[str, Any]:
    """What one training step of the eager model does on the first batch: gradients below fp16's
    range, the dtypes its ops ran in, and its FLOPs.

    They run on micro-batches of a quarter of the batch (`diagnostics_batch_size`), so they need no
    more memory than training does and the largest batch AMP fits (batch_sizes auto) is AMP's own: at
    the full batch, the underflow's fp32 backward would need fp32's activations in every precision.
    From batch 6 on, a micro-batch's fp32 activations are at most half the batch's, no more than any
    autocast step holds (autocast at best halves them); the model copies they train take no more
    than the optimizer's state will (AdamW, SGD with momentum).
    """
    inputs, targets = batches.peek()
    size = len(inputs)
    # Equal parts of 2 samples or more: BatchNorm can't train on one sample's 1x1 feature map.
    parts = min(DIAGNOSTIC_PARTS, max(1, size // 2))
    head = inputs.tensor_split(parts)[0], targets.tensor_split(parts)[0]  # the largest part
    part = len(head[0])
    # Every op FlopCounterMode counts (matmuls, convolutions, attention over a fixed sequence length)
    # does the same work per sample, so the batch's FLOPs are exactly the micro-batch's times
    # size / part (tests/test_cell.py checks the MLP, ResNet and GPT-2 against full-batch counts).
    flops = count_step_flops(model, loss, policy, *head) * size // part
    return {
        "grad_underflow_fraction": grad_underflow_fraction(model, loss, inputs, targets, parts=parts),
        "dtype_audit": audit_step(model, loss, policy, *head),  # which dtype an op runs in: not the batch's to decide
        "flops_per_step": flops,
        "diagnostics_batch_size": part,
    }


def timed_fields(stats: StepStats, spread: Spread, memory: PeakMemory) -> dict[str, Any]:
    """The record's view of the timed steps: their spread, step times and peak memory."""
    return {
        "throughput_windows": spread.windows,
        "throughput_spread": spread.spread,
        "noisy": spread.noisy,
        "step_time_ms_p50": stats.p50_ms,
        "step_time_ms_p90": stats.p90_ms,
        "step_time_ms_mean": stats.mean_ms,
        "step_time_ms_stdev": stats.stdev_ms,
        "peak_memory_mb": memory.peak_mb,
        "peak_memory_reserved_mb": memory.reserved_mb,
        "peak_memory_kind": memory.kind,
    }


def trained_fields(session: Session, loss_curve: list[float], validation: dict[str, float]) -> dict[str, Any]:
    """The record's view of what was trained: the loss curve, the validation metrics, the data."""
    return {
        "final_loss": loss_curve[-1],
        "loss_curve": loss_curve,
        "val_metric_name": session.workload.primary_metric,
        "val_metric": validation[session.workload.primary_metric],
        "val_higher_is_better": session.workload.higher_is_better,
        "val_metrics": validation,
        "val_loss": validation["val_loss"],
        "data_source": session.data.source,
        "data_fingerprint": session.data.fingerprint,
        "train_samples": len(session.data.train),
        "val_samples": len(session.data.validation),
    }


def warm_up(
    trainer: Trainer, batches: DeviceBatches, spec: CellSpec, device: torch.device, progress: Progress
) -> tuple[Curves, int | None, float]:
    """The warmup steps: (their losses and gradient norms, host syncs per step, seconds). The last
    one counts host syncs, once first-step work (cuDNN tuning, lazy optimizer state) is done."""
    clock = time.perf_counter()
    counted = min(1, spec.warmup_steps)
    first = trainer.run(
        batches, spec.warmup_steps - counted, on_step=lambda n: progress("warmup", n, spec.warmup_steps)
    )
    with count_host_syncs(device, trainer.optimizer) as syncs:
        last = trainer.run(batches, counted)
    progress("warmup", spec.warmup_steps, spec.warmup_steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # warmup work must not spill into the measured region
    curves = (torch.cat([first[0], last[0]]), torch.cat([first[1], last[1]]))
    return curves, syncs.count if counted else None, time.perf_counter() - clock


def audit_cell(spec: CellSpec) -> dict[str, Any]:
    """The dtype audit of one training step of this cell's workload and precision (amp-suite inspect)."""
    device = torch.device(spec.device)
    with make_policy(spec.precision, device.type).numerics():
        session = prepare(spec, device)
        return audit_step(session.model, session.workload.loss, session.policy, *session.batches.peek())


def check_finite(
    spec: CellSpec, device: torch.device, policy: PrecisionPolicy, warmup: Curves, measured: Curves, progress: Progress
) -> dict[str, Any]:
    """Find the first inf/NaN step; if there is one, replay it with hooks to name its source."""
    step = first_bad_step(policy, warmup, measured)
    if step is None:
        return {"nonfinite_step": None}
    progress("replay", 0, step + 1)
    # Eager: the hooks that name the site see every module (a compiled graph would hide them).
    replay = prepare(spec.model_copy(update={"compile": "off"}), device)
    replay.trainer.run(replay.batches, step)
    with watch_nonfinite(replay.trainer.model) as found:
        loss, grad_norm = replay.trainer.step(*replay.batches.next())
    site = first_site(found)
    return {"nonfinite_step": step, "nonfinite_site": site.describe(step) if site else _no_site(step, loss, grad_norm)}


def first_bad_step(policy: PrecisionPolicy, warmup: Curves, measured: Curves) -> int | None:
    """The first step whose loss, or gradient norm, went inf/NaN (synchronises: after the timed steps)."""
    losses = torch.cat([warmup[0], measured[0]])
    # With a GradScaler, inf/NaN gradients are routine (the step is skipped and the scale drops).
    grad_norms = None if policy.skips_nonfinite_steps else torch.cat([warmup[1], measured[1]])
    return first_nonfinite_step(losses, grad_norms)


def _no_site(step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> str:
    """No module output or gradient went non-finite in the replay: say what did."""
    if not torch.isfinite(loss):  # synchronises; only in the replay of a failed step
        return f"the loss went non-finite at step {step} outside every module (in the loss function)"
    if not torch.isfinite(grad_norm):
        return (
            f"the gradient norm overflowed at step {step}: every gradient is finite, but the sum of their"
            " squares is past float32's range (the weights have blown up)"
        )
    return f"non-finite loss or gradients at step {step}; the replay of that step stayed finite"


@contextmanager
def cudnn_autotune(device: torch.device) -> Iterator[None]:
    """Let cuDNN pick its fastest conv algorithms (during warmup), as tuned training runs do."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = device.type == "cuda"
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved
