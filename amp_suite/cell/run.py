"""Run one CellSpec: hardware check, then the measurement pipeline (amp_suite.cell.pipeline) on one
device, or its ranks for a data-parallel cell (amp_suite.cell.ddp), described as a CellRecord."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from amp_suite.cell import compilation
from amp_suite.cell.pipeline import (
    Curves,
    Progress,
    cudnn_autotune,
    first_bad_step,
    measure_session,
    no_progress,
    prepare,
)
from amp_suite.cell.precision import PrecisionPolicy, make_policy
from amp_suite.cell.turns import ALONE, Turns
from amp_suite.config import CellSpec
from amp_suite.config.base import DIVERGED, FAILED, OK, OOM, SKIPPED
from amp_suite.hardware import environment
from amp_suite.hardware.backends import backend_of
from amp_suite.hardware.peaks import utilisation
from amp_suite.hardware.probe import probe
from amp_suite.instruments.diagnostics.dtype_audit import audit_step
from amp_suite.instruments.diagnostics.nonfinite import first_site, watch_nonfinite
from amp_suite.instruments.memory import memory_at_oom
from amp_suite.records.machine import Machine
from amp_suite.records.results import CellRecord, describe_error, utc_now

Probed = Callable[[dict[str, Any]], None]  # the record fields that say where the cell runs


def run_cell(
    spec: CellSpec, progress: Progress = no_progress, probed: Probed | None = None, turns: Turns = ALONE
) -> CellRecord:
    """Never raises for a cell's own failure: it comes back as status "failed" with the error, or
    "oom" when the batch did not fit in device memory. `probed` is told the machine as soon as it
    is known, so that a cell killed later is still recorded under the machine it ran on. `turns`:
    the cell takes turns on the device with the other precisions of its comparison."""
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
            return CellRecord.for_spec(spec, SKIPPED, impossible, **fields)
        policy = make_policy(spec.precision, device.type)  # for the check and the global numerics
        unsupported = policy.unsupported_reason(caps) or policy.unsupported_compile(spec.compile)
        if unsupported and not spec.force:
            return CellRecord.for_spec(spec, SKIPPED, unsupported, **fields)
        with policy.numerics() as fp32_math, cudnn_autotune(device):
            fields.update(_measure_for(spec, turns)(spec, device, progress), fp32_math=fp32_math)
        fields.update(utilisation(caps.type, caps.name, spec.precision, fields["tflops"], spec.gpus))
        status, reason = OK, f"forced despite: {unsupported}" if unsupported else None
        if fields.get("nonfinite_step") is not None:
            status, reason = DIVERGED, fields["nonfinite_site"]
        return CellRecord.for_spec(spec, status, reason, duration_s=time.perf_counter() - clock, **fields)
    except torch.OutOfMemoryError as exc:  # a batch that does not fit is a result, with the memory figures
        traceback.print_exc()
        fields.update(memory_at_oom(backend_of(device), exc))
        reason = f"out of memory at batch {spec.batch_size}: {describe_error(exc, limit=400)}"
        return CellRecord.for_spec(spec, OOM, reason, duration_s=time.perf_counter() - clock, **fields)
    except Exception as exc:  # a failing cell is recorded and the matrix goes on
        traceback.print_exc()  # to the cell's log; the record gets one line
        reason = describe_error(exc, limit=500)
        return CellRecord.for_spec(spec, FAILED, reason, duration_s=time.perf_counter() - clock, **fields)


def unsupported_axes(spec: CellSpec, device: torch.device) -> str | None:
    """Why this cell's compile mode or memory layout can't run here (platform or model), or None."""
    if spec.channels_last and not spec.workload.image_inputs:
        return f"channels_last applies to image inputs; the {spec.workload.workload} workload has none"
    if spec.ddp is not None:
        from amp_suite.cell.ddp import launch

        return compilation.unsupported_reason(device, spec.compile) or launch.unsupported_reason(spec, device)
    return compilation.unsupported_reason(device, spec.compile)


def _measure_for(spec: CellSpec, turns: Turns) -> Callable[[CellSpec, torch.device, Progress], dict[str, Any]]:
    """A data-parallel cell is measured by its ranks, each a process of its own (amp_suite.cell.ddp),
    and never side by side: it holds devices of its own. A kernel benchmark by its own program."""
    if spec.workload.kernel_benchmark:  # not a training run: timed by its kernels, alone (never side by side)
        from amp_suite.cell.float8_benchmark import measure_benchmark

        return measure_benchmark
    if spec.ddp is None:
        return partial(measure, turns=turns)
    from amp_suite.cell.ddp.launch import measure_ddp

    return measure_ddp


def measure(spec: CellSpec, device: torch.device, progress: Progress, turns: Turns = ALONE) -> dict[str, Any]:
    session = prepare(spec, device)
    timed = measure_session(session, session.batches, spec, device, progress, turns=turns)
    return {**timed.fields, **check_finite(spec, device, session.policy, timed.warmup, timed.measured, progress)}


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
