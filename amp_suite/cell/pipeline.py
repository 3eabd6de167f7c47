"""The measurement pipeline every cell runs, on one device (amp_suite.cell.run) or as one rank of a
data-parallel cell (amp_suite.cell.ddp.rank), written once.

prepare -> the policy's matmul check -> step diagnostics -> cached blocks released -> warmup ->
the timed steps, in windows (every instrument the record's schema names, and host CPU time, around
them; side by side, one window a turn: amp_suite.cell.turns) -> evaluation -> the record's fields.
A caller changes only what is its own: DDP wraps the trainer, starts the ranks' timed steps
together, runs the diagnostics on rank 0, and adds its communication figures.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from amp_suite.cell import compilation
from amp_suite.cell.convergence import Evaluations, target_fields
from amp_suite.cell.loop import Curves, Trainer
from amp_suite.cell.precision import PrecisionPolicy, make_policy
from amp_suite.cell.turns import ALONE, Turns, give, ready
from amp_suite.cell.windows import timing_rounds, train_timed
from amp_suite.config import CellSpec
from amp_suite.config.base import turns_before_timing, window_edges
from amp_suite.data import DeviceBatches, batch_order, order_hash
from amp_suite.hardware.backends import Backend, backend_of
from amp_suite.instruments import Readings, TimedRegion, instrumented, region_instruments
from amp_suite.instruments.diagnostics.dtype_audit import audit_step
from amp_suite.instruments.diagnostics.flops import count_step_flops
from amp_suite.instruments.diagnostics.gpu_work import GpuWork
from amp_suite.instruments.diagnostics.host_syncs import count_host_syncs
from amp_suite.instruments.diagnostics.nonfinite import first_nonfinite_step
from amp_suite.instruments.diagnostics.underflow import grad_underflow_fraction
from amp_suite.instruments.timers import HostCpuTime, Span, Spread, StepStats, step_stats
from amp_suite.records.finish import merged
from amp_suite.workloads import Workload, build_workload
from amp_suite.workloads.base import LoadedData

# progress(phase, steps done, steps in phase)
Progress = Callable[[str, int, int], None]
# Resolved at import: the forkserver preloads this module, so no cell imports its instruments itself.
REGION_INSTRUMENTS = region_instruments()
DIAGNOSTIC_PARTS = 4  # the step diagnostics run on micro-batches of a quarter of the batch (step_diagnostics)


def no_progress(phase: str, done: int, total: int) -> None:
    pass


@dataclass
class Session:
    """Everything one training run needs, built the same way every time for a given spec."""

    workload: Workload
    data: LoadedData
    model: nn.Module  # eager; trainer.model is its compiled form when the cell compiles
    policy: PrecisionPolicy
    trainer: Trainer
    batches: DeviceBatches
    as_written: nn.Module | None = None  # the model before the policy swapped its layers; None: not swapped


def load_cell(spec: CellSpec) -> tuple[Workload, LoadedData]:
    """The cell's workload and its data, which must hold a batch."""
    workload = build_workload(spec.workload, spec.channels_last)
    torch.manual_seed(spec.seed)  # a user's entry builds its model (and may draw its data) here
    data = workload.load_data()
    if spec.batch_size > len(data.train):  # `samples` only caps real data: digits has 1,437 to train on
        raise ValueError(f"batch {spec.batch_size} is larger than the training set ({len(data.train)} samples)")
    return workload, data


def prepare(spec: CellSpec, device: torch.device) -> Session:
    workload, data = load_cell(spec)
    torch.manual_seed(spec.seed)  # same initial weights for every precision
    policy = make_policy(spec.precision, device.type)
    written = workload.to_device(workload.build_model(data.train), device)
    # FLOPs are the model's as written, the same in every mode: a mode that swaps layers (fp8's)
    # does work of its own (torchao's backward computes the first layer's input gradient too).
    as_written = copy.deepcopy(written) if policy.swaps_layers else None
    model = policy.convert_module(written)
    data = data.to(device, workload.memory_format)
    optimizer = workload.make_optimizer(model)
    policy.bind(optimizer)
    order = batch_order(len(data.train), spec.batch_size, spec.warmup_steps + spec.steps, spec.seed)
    trainer = Trainer(
        compilation.compiled(model, spec.compile), optimizer, policy, workload, spec.max_grad_norm,
        keep=compilation.kept_output(spec.compile),
    )  # fmt: skip
    return Session(workload, data, model, policy, trainer, DeviceBatches(data.train, order), as_written)


@dataclass(frozen=True)
class Measured:
    """The timed steps, for what a caller adds of its own: the record's fields, the curves of
    warmup and timed steps (its non-finite check) and the trainer and step times it timed."""

    fields: dict[str, Any]
    warmup: Curves
    measured: Curves
    trainer: Trainer
    stats: StepStats


def measure_session(
    session: Session,
    batches: DeviceBatches,
    spec: CellSpec,
    device: torch.device,
    progress: Progress = no_progress,
    *,
    world: int = 1,
    diagnose: bool = True,
    wrap: Callable[[Trainer], Trainer] | None = None,
    before_timed: Callable[[], None] | None = None,
    turns: Turns = ALONE,
) -> Measured:
    """The pipeline over these batches. `world` devices train together (throughput, FLOP/s and
    the spread count all of their samples); `wrap` replaces the trainer after the diagnostics
    (DDP's wrapped model); `before_timed` runs between warmup and the timed steps (DDP's barrier);
    `turns`: the device is shared with the other precisions of the comparison, a window at a time."""
    policy, model = session.policy, session.model
    progress("diagnostics", 0, 1)  # a phase of its own: the run's stall watchdog names the phase a cell stalls in
    matmul_dtype = policy.checked_matmul_dtype(device)
    # The diagnostics run the eager model: the same arithmetic, and nothing for the compiler to trace.
    as_written, session.as_written = session.as_written, None  # the copy is not held while timed
    diagnostics = step_diagnostics(model, session.workload.loss, policy, batches, as_written) if diagnose else {}
    del as_written
    # Their fp32 backward and model copies leave blocks in the allocator's cache; released, the
    # reserved-memory peak of the timed steps is the training's own.
    backend = backend_of(device)
    backend.release_cached_blocks()
    trainer = session.trainer if wrap is None else wrap(session.trainer)

    held_back = turns_before_timing(spec.warmup_steps) if turns.shared else 0
    # The GPU's own work is traced in warmup steps the cell runs alone on the device: side by side,
    # those kept back for its first turn; else the last ones.
    gpu_work = GpuWork(backend)
    warmup, host_syncs, warmup_s = warm_up(trainer, batches, spec, backend, progress, held_back, gpu_work)
    if before_timed is not None:
        before_timed()
    warmup = _concatenated(warmup, _first_turns(turns, trainer, batches, backend, held_back, gpu_work))
    # Sequential timing (side by side): after the fixed schedule, rounds past it until the stopping
    # rule decides or the budget ends (execution.side_by_side); the timer holds them all.
    sequential = turns.shared and spec.stopping.rule == "sequential"
    timer = backend.step_timer(spec.steps * (spec.stopping.budget if sequential else 1))
    target = spec.workload.target
    edges = window_edges(spec.steps)
    samples_per_step = world * spec.batch_size

    def evaluate() -> dict[str, float]:
        # The eager module holds the trained weights too; evaluating it spares a recompile for eval
        # mode and for the last, smaller batch.
        return session.workload.evaluate(model, session.data.validation, spec.batch_size, policy.forward_context)

    def handover(first: int) -> None:
        give(turns, timer.rate_since(first, samples_per_step))  # the window that began at step `first`
        turns.take()

    # Every instrument the record's schema names (peak memory, the GPU's state), then the host's
    # CPU clock innermost, so that it counts the steps and not the instruments' readings. Between
    # windows (another cell's turn) and for time to target's evaluations, what can pause does.
    with instrumented(backend, REGION_INSTRUMENTS) as readings, HostCpuTime() as host_cpu:
        paused = partial(_between_steps, backend, readings, host_cpu)
        measured, evaluations = train_timed(
            trainer, batches, timer, lambda n: progress("measure", n, spec.steps),
            edges=edges, every=None if target is None else target.eval_every,
            evaluate=lambda: _announced(progress, evaluate)[session.workload.primary_metric],
            paused=paused, handover=handover, rewarm=turns.shared,
        )  # fmt: skip
        # Accuracy is the matrix's steps': sequential, evaluated now, in this cell's own turn, before
        # rounds that only time; else once no cell of the comparison times its steps any more.
        validation = _evaluated(evaluate, paused, progress) if sequential else None
        edges = edges + timing_rounds(
            trainer, batches, timer, turns, edges, samples_per_step, paused,
            lambda done, total: progress("measure", done, total),
        )  # fmt: skip
        times_ms, span_s = timer.read()  # synchronises once
    timed = timer.timed_steps  # side by side, each turn's first step is trained but not timed
    stats = step_stats(times_ms)
    spread = Spread.of(timer.spans, edges, samples_per_step)
    # Throughput counts the windows kept: a hiccup's window is set aside, and listed (timers.Spread).
    samples, seconds = spread.samples, spread.seconds
    if not samples:  # no window to count by (a timer without spans): every timed step
        samples, seconds = samples_per_step * timed, span_s
    steps_kept = samples / samples_per_step
    loss_curve = measured[0].float().cpu().tolist()  # device -> host copy, after the timed region
    if validation is None:
        validation = _evaluated(evaluate, nullcontext, progress)
    flops = diagnostics.get("flops_per_step")
    rates = {
        "throughput": samples / seconds,  # every device's samples
        "step_time_ms": seconds * 1e3 / steps_kept,  # the same windows' mean step: one figure with throughput
        "settled_after_steps": spec.warmup_steps + edges[spread.warming],
        "host_cpu_ms_per_step": host_cpu.seconds * 1e3 / timed,
        "untimed_steps": edges[-1] - timed,
        "timing_stop": turns.stopped,
        "warmup_s": warmup_s,
        "host_syncs_per_step": host_syncs,
        # MFU divides FLOP/s by world size x one device's peak: the devices' together, as throughput.
        "tflops": None if flops is None else world * flops * steps_kept / seconds / 1e12,
        "matmul_dtype": str(matmul_dtype).removeprefix("torch."),
        "batch_order_hash": order_hash(batches.order.cpu()),
    }
    # Merged, not spread with **: a field two parts gave would keep the later value without a sign.
    fields = merged(
        {
            "diagnostics": diagnostics,
            "timed steps": rates,
            "step times": timed_fields(stats, spread),
            "training": trained_fields(session, loss_curve, validation),
            "time to target": evaluation_fields(session, spec, evaluations, timer.spans, validation),
            "instruments": readings.fields(TimedRegion(timed, spec.batch_size)),  # this device and its own samples
            "GPU work": gpu_work.fields(seconds * 1e3 / steps_kept),  # against the step throughput counts
            "precision policy": policy.telemetry(),
        }
    )
    return Measured(fields, warmup, measured, trainer, stats)


def step_diagnostics(
    model: nn.Module, loss, policy: PrecisionPolicy, batches: DeviceBatches, as_written: nn.Module | None = None
) -> dict[str, Any]:
    """What one training step of the eager model does on the first batch: gradients below fp16's
    range, the dtypes its ops ran in, and its FLOPs and their share of its arithmetic (counted on
    `as_written`, the model before the policy swapped its layers, where it did).

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
    # size / part (tests/unit/cell/test_pipeline.py checks the MLP, ResNet and GPT-2 against full-batch counts).
    # The share of the arithmetic in them is the micro-batch's: the other ops' elements grow with the
    # batch too, all but the per-parameter ones (bias and norm gradients), a sliver of the step.
    counted = model if as_written is None else as_written
    flops = count_step_flops(counted, loss, policy, *head)
    return {
        "grad_underflow_fraction": grad_underflow_fraction(model, loss, inputs, targets, parts=parts),
        "dtype_audit": audit_step(model, loss, policy, *head),  # which dtype an op runs in: not the batch's to decide
        "flops_per_step": flops.matmul * size // part,
        "matmul_flop_share": flops.matmul_share,
        "diagnostics_batch_size": part,
    }


def timed_fields(stats: StepStats, spread: Spread) -> dict[str, Any]:
    """The record's view of the timed steps: their spread and step times."""
    return {
        "throughput_windows": spread.windows,
        "throughput_spread": spread.spread,
        "windows_set_aside": [asdict(window) for window in spread.set_aside],
        "noisy": spread.noisy,
        "step_time_ms_p50": stats.p50_ms,
        "step_time_ms_p90": stats.p90_ms,
        "step_time_ms_mean": stats.mean_ms,
        "step_time_ms_stdev": stats.stdev_ms,
    }


def trained_fields(session: Session, loss_curve: list[float], validation: dict[str, float]) -> dict[str, Any]:
    """The record's view of what was trained: the loss curve, the validation metrics, the data."""
    return {
        "final_loss": loss_curve[-1],
        "loss_curve": loss_curve,
        "val_metric_name": session.workload.primary_metric,
        "val_metric": validation[session.workload.primary_metric],
        "val_higher_is_better": session.workload.higher_is_better,
        "val_metric_chance": session.workload.chance_metric(session.data.validation),
        "val_metrics": validation,
        "val_loss": validation["val_loss"],
        "data_source": session.data.source,
        "data_fingerprint": session.data.fingerprint,
        "train_samples": len(session.data.train),
        "val_samples": len(session.data.validation),
    }


def evaluation_fields(
    session: Session, spec: CellSpec, evaluations: Evaluations, spans: list[Span], validation: dict[str, float]
) -> dict[str, Any]:
    """Time to target: the evaluation curve, its cost, and the declared target's crossing."""
    target = spec.workload.target
    if target is None:
        return {}
    workload = session.workload
    curve = evaluations.curve(spans, spec.warmup_steps, spec.steps, validation[workload.primary_metric])
    return {
        "eval_every": target.eval_every,
        "eval_curve": curve,
        "eval_s": evaluations.seconds,
        **target_fields(curve, target.value, workload.higher_is_better),
    }


def _announced(progress: Progress, evaluate: Callable[[], dict[str, float]]) -> dict[str, float]:
    """An evaluation between timed steps (time to target) says so: no step completes while it runs,
    and the run's watchdog gives a phase without steps a limit of its own."""
    progress("evaluate", 0, 1)
    return evaluate()


def _evaluated(evaluate: Callable[[], dict[str, float]], paused: Callable, progress: Progress) -> dict[str, float]:
    progress("evaluate", 0, 1)
    with paused():
        return evaluate()


@contextmanager
def _between_steps(backend: Backend, readings: Readings, host_cpu: HostCpuTime) -> Iterator[None]:
    """An evaluation, or another cell's turn, between runs of timed steps: left out of the
    instruments that can pause. On a GPU the steps already queued finish first: their time and
    energy are the training's, and the device is idle when another cell takes its turn."""
    backend.synchronize()
    with readings.paused(), host_cpu.paused():
        yield


def warm_up(
    trainer: Trainer,
    batches: DeviceBatches,
    spec: CellSpec,
    backend: Backend,
    progress: Progress,
    held_back: int = 0,
    gpu_work: GpuWork | None = None,
) -> tuple[Curves, int | None, float]:
    """The warmup steps but the last `held_back` (side by side, they run in a round of turns):
    (their losses and gradient norms, host syncs per step, seconds). The last one counts host
    syncs, once first-step work (cuDNN tuning, lazy optimizer state) is done; with none held back,
    `gpu_work` traces the ones before it."""
    clock = time.perf_counter()
    steps = spec.warmup_steps - held_back
    counted = min(1, steps)
    done = iter(range(1, steps + 1))

    def train(count: int) -> Curves:
        return trainer.run(batches, count, on_step=lambda _: progress("warmup", next(done), spec.warmup_steps))

    first = gpu_work.run(train, steps - counted) if gpu_work and not held_back else [train(steps - counted)]
    with count_host_syncs(backend, trainer.optimizer) as syncs:
        last = trainer.run(batches, counted)
    progress("warmup", steps, spec.warmup_steps)
    backend.synchronize()  # warmup work must not spill into the measured region
    return _concatenated(*first, last), syncs.count if counted else None, time.perf_counter() - clock


def _first_turns(
    turns: Turns, trainer: Trainer, batches: DeviceBatches, backend: Backend, held_back: int, gpu_work: GpuWork
) -> Curves:
    """Ready, then the turn for the warmup steps kept back (side by side: a round of turns before
    any is timed; `gpu_work` traces them), then the turn for the first window; the kept-back steps' curves."""
    ready(turns, backend.held())
    turns.take()
    curves = _concatenated(*gpu_work.run(lambda count: trainer.run(batches, count), held_back))
    if held_back:
        backend.synchronize()
        give(turns)
        turns.take()
    return curves


def _concatenated(*parts: Curves) -> Curves:
    return torch.cat([losses for losses, _ in parts]), torch.cat([norms for _, norms in parts])


def first_bad_step(policy: PrecisionPolicy, warmup: Curves, measured: Curves) -> int | None:
    """The first step whose loss, or gradient norm, went inf/NaN (synchronises: after the timed steps)."""
    losses = torch.cat([warmup[0], measured[0]])
    # With a GradScaler, inf/NaN gradients are routine (the step is skipped and the scale drops).
    grad_norms = None if policy.skips_nonfinite_steps else torch.cat([warmup[1], measured[1]])
    return first_nonfinite_step(losses, grad_norms)


@contextmanager
def cudnn_autotune(device: torch.device) -> Iterator[None]:
    """Let cuDNN pick its fastest conv algorithms (during warmup), as tuned training runs do."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = backend_of(device).autotunes_convolutions
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved
