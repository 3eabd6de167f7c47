"""One DDP rank: `python -m amp_suite.cell.ddp.rank <spec.json> <folder>`, started by amp_suite.cell.ddp.launch.

It runs the pipeline a single-device cell runs (amp_suite.cell.pipeline: the same session, seed,
initial weights and precision policy with its own GradScaler), on its shard of the seeded batch
stream, its model wrapped in DistributedDataParallel after the diagnostics. The timed steps
synchronise gradients as DDP always does; then, after validation, the same batches run again
inside `no_sync()` (no all-reduce), and the difference is what communication costs. It writes
`rank<N>.json` in the folder: {"fields": ...} or {"error": ..., "oom": ..., "memory": ...}.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from amp_suite.cell import compilation
from amp_suite.cell.loop import Trainer
from amp_suite.cell.pipeline import Curves, cudnn_autotune, first_bad_step, measure_session, prepare
from amp_suite.cell.precision import PrecisionPolicy, make_policy
from amp_suite.config import CellSpec
from amp_suite.data import DeviceBatches, batch_order, order_hash
from amp_suite.hardware.backends import backend_of
from amp_suite.instruments.memory import memory_at_oom
from amp_suite.instruments.timers import step_stats
from amp_suite.records.results import describe_error
from amp_suite.signals import stop_with_parent

COMM_HOOKS = {"none": None, "fp16": "fp16_compress_hook", "bf16": "bf16_compress_hook"}


def main(argv: list[str]) -> int:
    _stop_with_parent()
    spec_path, folder = Path(argv[1]), Path(argv[2])
    rank, device = int(os.environ["RANK"]), None
    try:
        spec = CellSpec.model_validate_json(spec_path.read_text())
        device = rank_device(spec)
        fields = run_rank(spec, device, rank, int(os.environ["WORLD_SIZE"]))
        _write(folder / f"rank{rank}.json", {"fields": fields})
        return 0
    except Exception as exc:  # the launcher stops the other ranks; the record gets this line
        traceback.print_exc()
        _write(folder / f"rank{rank}.json", _failure(exc, device))
        return 1


def _failure(exc: Exception, device: torch.device | None) -> dict[str, Any]:
    """The error in one line and, when it is an OOM, this rank's allocator figures at that moment,
    which the launcher puts in the record (its own allocator never held the rank's tensors)."""
    oom = isinstance(exc, torch.OutOfMemoryError)
    memory = memory_at_oom(backend_of(device)) if oom and device is not None else {}
    return {"error": describe_error(exc, limit=400), "oom": oom, "memory": memory}


def rank_device(spec: CellSpec) -> torch.device:
    return backend_of(spec.device).rank_device(int(os.environ["LOCAL_RANK"]))


def run_rank(spec: CellSpec, device: torch.device, rank: int, world: int) -> dict[str, Any]:
    live = backend_of(device)
    live.take_for_rank()
    dist.init_process_group(live.process_group, device_id=live.bound_device())
    try:
        with make_policy(spec.precision, device.type).numerics(), cudnn_autotune(device):
            return measure_rank(spec, device, rank, world)
    finally:
        dist.destroy_process_group()


def measure_rank(spec: CellSpec, device: torch.device, rank: int, world: int) -> dict[str, Any]:
    assert spec.ddp is not None
    session = prepare(spec, device)
    # One seeded stream of batches for every world size; rank r takes every world-th of it.
    stream = batch_order(len(session.data.train), spec.batch_size, world * (spec.warmup_steps + spec.steps), spec.seed)
    mine = stream[rank::world]
    live = backend_of(device)
    wrapped = None

    def wrap(trainer: Trainer) -> Trainer:
        nonlocal wrapped
        wrapped = DistributedDataParallel(session.model, device_ids=live.ddp_device_ids())
        _register_hook(wrapped, spec.ddp.comm_hook)
        return replace(trainer, model=compilation.compiled(wrapped, spec.compile))

    # Rank 0's diagnostics see one local step, before DDP wraps the model (no communication); the
    # ranks start the timed steps together.
    timed = measure_session(
        session, DeviceBatches(session.data.train, mine), spec, device,
        world=world, diagnose=rank == 0, wrap=wrap, before_timed=dist.barrier,
    )  # fmt: skip

    # The same batches again without the all-reduce. The ranks' weights drift apart from here on:
    # everything the record says about the model was measured above.
    replay = DeviceBatches(session.data.train, mine[spec.warmup_steps :])
    dist.barrier()
    no_sync_timer = live.step_timer(spec.steps)
    with wrapped.no_sync():
        timed.trainer.run(replay, spec.steps, no_sync_timer)
    no_sync = step_stats(no_sync_timer.read()[0])
    raw_share = 1 - no_sync.p50_ms / timed.stats.p50_ms
    return {
        **timed.fields,
        "host_cpu_ms_per_step": None,  # the suite's process is not the ranks': no one process's CPU time
        "step_time_ms_no_sync_p50": no_sync.p50_ms,
        "step_time_ms_no_sync_mean": no_sync.mean_ms,
        "comm_share_raw": raw_share,
        "comm_share": max(0.0, raw_share),
        "ddp_backend": live.process_group,
        "rank_threads": torch.get_num_threads() if live.is_host else None,
        "batch_order_hash": order_hash(stream),  # the whole stream: equal across ranks and world sizes' prefixes
        **_check_finite(timed.warmup, timed.measured, session.policy, rank),
    }


def _check_finite(warmup: Curves, measured: Curves, policy: PrecisionPolicy, rank: int) -> dict[str, Any]:
    """The first inf/NaN step. Gradients are averaged over the ranks, so a non-finite one shows on
    rank 0 too. Unlike a single-device cell, the step is not replayed to name the module."""
    step = first_bad_step(policy, warmup, measured)
    if step is None:
        return {"nonfinite_step": None}
    site = f"non-finite loss or gradients at step {step} (rank {rank}); DDP cells do not replay it to name the module"
    return {"nonfinite_step": step, "nonfinite_site": site}


def _register_hook(model: DistributedDataParallel, name: str) -> None:
    """fp16/bf16: PyTorch's compression hooks (gradients cast to half width for the all-reduce)."""
    if COMM_HOOKS[name] is not None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        model.register_comm_hook(None, getattr(default_hooks, COMM_HOOKS[name]))


def _write(path: Path, payload: dict[str, Any]) -> None:
    # allow_nan: a diverged loss is a result; the record turns NaN into its documented strings
    path.write_text(json.dumps(payload, allow_nan=True))


def _stop_with_parent() -> None:
    """SIGKILL this rank when the process that launched it dies, even by SIGKILL, so a killed
    suite never leaves ranks holding devices (they run in sessions of their own)."""
    stop_with_parent(signal.SIGKILL)
    if os.getppid() == 1:  # the launcher died before the request was made
        sys.exit(128 + signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
