"""Launch a DDP cell's ranks with PyTorch's own launcher, and turn what they wrote into record fields.

The cell's process (amp_suite.execution.worker) is the elastic agent: `elastic_launch` with a standalone
c10d rendezvous on loopback starts one process per rank (`python -m amp_suite.cell.ddp.rank`), watches
them, and when one fails stops the others and raises. A rank writes its measurements, or its
error, to a file of its own; rank 0's measurements become the record, every rank's median step
is kept beside them. No restarts: a cell that fails is a result, recorded as failed.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from amp_suite.config import CellSpec
from amp_suite.hardware.backends import backend_of
from amp_suite.instruments.memory import ForwardedOutOfMemoryError

RENDEZVOUS_TIMEOUT_S = 120  # every rank imports torch before it joins; a loaded 2-core box takes ~10 s
SHUTDOWN_TIMEOUT_S = 5  # a rank stopped by the agent gets this long before SIGKILL (the worker gets 5 s too)
AGENT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # what the launcher takes over while ranks run
Progress = Callable[[str, int, int], None]


def unsupported_reason(spec: CellSpec, device: torch.device) -> str | None:
    """Why this DDP cell can't run here (not a matter of speed), or None."""
    import torch.distributed as dist

    assert spec.ddp is not None
    live = backend_of(device)
    if not dist.is_available():
        return "this PyTorch build has no torch.distributed"
    if not dist.is_backend_available(live.process_group):
        return f"this PyTorch build has no {live.process_group} backend for DDP on {device.type}"
    return live.missing_devices(spec.ddp.world_size)


def measure_ddp(spec: CellSpec, device: torch.device, progress: Progress) -> dict[str, Any]:
    """Run the ranks to completion; the fields of rank 0's measurement, or an exception saying
    which rank failed and why (a torch.OutOfMemoryError with the rank's memory figures when it ran
    out of device memory). `tflops` and `throughput` are the ranks' together: the cell's MFU
    divides by the world size's peak (amp_suite.hardware.peaks.utilisation)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    assert spec.ddp is not None
    world = spec.ddp.world_size
    progress(f"ddp x{world}", 0, 1)
    with tempfile.TemporaryDirectory(prefix="amp-suite-ddp-") as folder:
        work = Path(folder)
        (work / "spec.json").write_text(spec.model_dump_json())
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=world, run_id=f"amp-suite-{uuid.uuid4().hex[:12]}",
            rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", local_addr="127.0.0.1",
            rdzv_configs={"timeout": RENDEZVOUS_TIMEOUT_S}, max_restarts=0, monitor_interval=0.1,
            logs_specs=DefaultLogsSpecs(log_dir=str(work / "elastic")), shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        )  # fmt: skip
        try:
            with _launcher_owns_signals(), _quiet_agent():
                rank = ("-m", "amp_suite.cell.ddp.rank", str(work / "spec.json"), str(work))
                elastic_launch(config, sys.executable)(*rank)
        except SignalException as exc:  # the suite stopped this cell: the agent has stopped the ranks
            raise SystemExit(128 + exc.sigval) from None
        except ChildFailedError as exc:
            raise _rank_error(exc, work, world) from None
        results = [_read(work / f"rank{rank}.json") for rank in range(world)]
    progress(f"ddp x{world}", 1, 1)
    fields = results[0]["fields"]
    fields["rank_step_time_ms_p50"] = [r["fields"]["step_time_ms_p50"] for r in results]
    return fields


def _rank_error(exc: Any, work: Path, world: int) -> Exception:
    """The first rank that failed, in one line: its own error where it wrote one, else how it died."""
    rank, failure = exc.get_first_failure()
    written = _read(work / f"rank{rank}.json")
    if "error" in written:
        message = f"rank {rank} of {world} failed: {written['error']}"
        # An OOM carries the rank's allocator figures: this process never held the rank's tensors.
        if written.get("oom"):
            return ForwardedOutOfMemoryError(message, written.get("memory", {}))
        return RuntimeError(message)
    if failure.exitcode < 0:
        name = failure.signal_name()
        hint = ", often the out-of-memory killer" if name == "SIGKILL" else ""
        return RuntimeError(f"rank {rank} was killed by {name}{hint}; the other ranks were stopped")
    return RuntimeError(f"rank {rank} exited with code {failure.exitcode} before writing a result")


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@contextmanager
def _launcher_owns_signals() -> Iterator[None]:
    """The launcher installs its own stop handlers (it must stop the ranks) and never restores
    them: put the cell process's back afterwards."""
    saved = {name: signal.getsignal(getattr(signal, name)) for name in AGENT_SIGNALS}
    try:
        yield
    finally:
        for name, handler in saved.items():
            signal.signal(getattr(signal, name), handler)


@contextmanager
def _quiet_agent() -> Iterator[None]:
    """The agent logs its configuration at WARNING; the cell's log keeps only real warnings."""
    chatty = logging.getLogger("torch.distributed.launcher.api")
    level = chatty.level
    chatty.setLevel(logging.ERROR)
    try:
        yield
    finally:
        chatty.setLevel(level)
