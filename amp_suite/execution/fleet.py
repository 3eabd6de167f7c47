"""A fleet on Ray: cells run as Ray tasks on the cluster's boxes, and their records come home.

Each cell is one task that asks for the GPUs it needs (one; a DDP cell its world size) and, when
the matrix names machine types, for the resource Ray gives every node by its GPU model
(`accelerator_type:A100`). On its node the task runs the cell as a local run does, in a fresh
process (amp_suite.execution.worker) given the GPUs Ray assigned to that task; the record and the cell's
log come back to the driver, which writes results.jsonl and MLflow exactly as for a local run.

Ray retries nothing here (max_retries=0): a cell whose node is lost comes back `failed` with the
reason, never missing and never run twice. A cell that no node left in the cluster can take (its
machine type's last node died) waits for one to join (AMP_SUITE_RAY_WAIT_S, default 120 s: an
autoscaler may be adding one), then fails too.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amp_suite.config import CellSpec, ConfigError
from amp_suite.config.base import FAILED
from amp_suite.execution.worker import Cancelled, Placement
from amp_suite.hardware.backends import backend_named, registered
from amp_suite.records.finish import finished
from amp_suite.records.results import CellRecord, describe_error

MACHINE_RESOURCE = "accelerator_type:"  # Ray's node resource per GPU model, e.g. accelerator_type:H100
WAIT_FOR_NODE_S = 120.0  # how long a cell waits for a node that can take it (one may be joining)
POLL_S = 0.5  # how often a waiting cell checks for a stop
ROOM_CHECK_S = 5.0  # how often it asks the cluster whether a node can still take it (one call to Ray's GCS)
CONNECT_TIMEOUT_S = 5.0  # for the cluster's port to answer at all
LOG_TAIL_BYTES = 1 << 20  # of a cell's log, what comes back to the driver


@dataclass(frozen=True)
class NodeResult:
    """What a task sends back: the record (JSON), the tail of the cell's log, where it ran."""

    record_json: str
    log: str
    node: str


def _gpus_ray_gave() -> Placement:
    """The GPUs Ray gave this task, named to the cell in the variable Ray set: a backend's
    visible-devices variable, the one of the GPUs Ray gave, whichever device the cell names."""
    for variable in (cls.visible_devices for cls in registered() if cls.visible_devices):
        if variable in os.environ:
            return Placement(os.environ[variable], variable=variable)
    return Placement()


def _run_on_node(spec_json: str) -> NodeResult:
    """The Ray task: one cell, in a fresh process of this node, its log kept in a scratch folder."""
    from amp_suite.execution.worker import cell_context, run_isolated

    spec = CellSpec.model_validate_json(spec_json)
    # Ray reuses this worker process for later tasks (max_calls defaults to 0, "no limit", unless
    # num_gpus is given at decoration) and sets the visible-devices variable to each task's GPUs
    # while it runs. The cell is forked from the forkserver the first task started, which kept that task's
    # value: name this task's GPUs to the cell (max_calls=1 would pay a new worker and forkserver,
    # torch's import, per cell). None (a CPU run: Ray sets nothing) inherits, and every task of
    # that run is a CPU task (a job's workers serve that job only).
    placement = _gpus_ray_gave()
    with tempfile.TemporaryDirectory(prefix="amp-suite-cell-") as scratch:
        log = Path(scratch) / "cell.log"
        context = cell_context([spec.workload.module])
        record = run_isolated(context, spec, log, lambda *progress: None, placement=placement)
        with open(log, "rb") as file:
            file.seek(max(0, log.stat().st_size - LOG_TAIL_BYTES))
            text = file.read().decode(errors="replace")
    return NodeResult(record.model_dump_json(), text, socket.gethostname())


class Fleet:
    """A connection to a Ray cluster (`--ray ADDRESS`, or auto: the cluster this box belongs to)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._ray: Any = None
        self._task: Any = None
        self.wait_for_node_s = float(os.environ.get("AMP_SUITE_RAY_WAIT_S", WAIT_FOR_NODE_S))

    def connect(self) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install 'amp-suite[ray]' (the image has it)") from None
        _check_reachable(os.environ.get("RAY_ADDRESS", "") if self.address == "auto" else self.address)
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level="warning", configure_logging=False)
        except Exception as exc:  # ConnectionError, or Ray's own errors: all mean "no cluster there"
            raise ConfigError(f"--ray {self.address}: no Ray cluster to connect to ({describe_error(exc)})") from None
        self._ray = ray
        self._task = ray.remote(_run_on_node)

    def close(self) -> None:
        if self._ray is not None:
            self._ray.shutdown()

    def resources(self) -> dict[str, float]:
        """The cluster's total resources now (one call to Ray's GCS)."""
        return self._ray.cluster_resources()

    def run(self, spec: CellSpec, log_path: Path, cancelled: threading.Event | None) -> CellRecord:
        """Run the cell on the cluster; blocks the calling thread until its record is back."""
        demand = _demand(spec)
        cpus, gpus = demand.pop("CPU"), demand.pop("GPU", 0)  # what remains: the GPU type, if any
        task = self._task.options(max_retries=0, num_cpus=cpus, num_gpus=gpus, resources=demand)
        ref = task.remote(spec.model_dump_json())
        try:
            result = self._wait(ref, spec, cancelled)
        except (self._ray.exceptions.RayError, NoNodeLeft) as exc:
            return _lost(spec, exc)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(result.log)
        record = CellRecord.model_validate_json(result.record_json)
        environment = {**record.environment, "ray_node": result.node}  # the host the cell ran on
        return finished(record, {"fleet": {"log_path": str(log_path), "environment": environment}})

    def _wait(self, ref, spec: CellSpec, cancelled: threading.Event | None) -> NodeResult:
        ray, homeless_since, checked = self._ray, None, time.monotonic()
        while not ray.wait([ref], timeout=POLL_S)[0]:
            if cancelled is not None and cancelled.is_set():
                ray.cancel(ref, force=True)
                raise Cancelled()
            now = time.monotonic()
            if now - checked < min(ROOM_CHECK_S, self.wait_for_node_s):
                continue
            checked = now
            if capacity(spec, self.resources()) > 0:
                homeless_since = None
            elif homeless_since is None:
                homeless_since = now
            elif now - homeless_since > self.wait_for_node_s:
                ray.cancel(ref, force=True)
                raise NoNodeLeft(f"no node in the Ray cluster can take it any more (needs {_demand(spec)})")
        return ray.get(ref)


def _check_reachable(address: str) -> None:
    """Ray retries a cluster that isn't there for minutes, deaf to Ctrl-C: ask its port first."""
    if not address or address == "auto":
        return  # Ray looks for the cluster this box belongs to, and says at once when there is none
    client = address.startswith("ray://")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        host, port = address.removeprefix("ray://"), "10001" if client else "6379"  # Ray's default ports
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--ray {address}: no Ray cluster answers at {host}:{port} ({describe_error(exc)})") from None


def capacity(spec: CellSpec, resources: dict[str, float]) -> int:
    """How many cells like this one the cluster can run at once (0: no node can take it)."""
    return min(int(resources.get(name, 0) // amount) for name, amount in _demand(spec).items())


def slots(device: str, resources: dict[str, float]) -> int:
    """The GPUs in the cluster (CPUs, for CPU cells): how many one-device cells fit at once."""
    return int(resources.get(backend_named(device).ray_resource, 0))


def machine_types(resources: dict[str, float]) -> list[str]:
    """The GPU models the cluster's nodes have, as Ray names them."""
    return sorted(name.removeprefix(MACHINE_RESOURCE) for name in resources if name.startswith(MACHINE_RESOURCE))


def _demand(spec: CellSpec) -> dict[str, float]:
    """The cluster resources one cell holds while it runs."""
    backend = backend_named(spec.device)
    ranks: dict[str, float] = {backend.ray_resource: spec.gpus}  # a rank holds its device: a GPU, or on a CPU a core
    demand: dict[str, float] = ranks if backend.is_host else {"CPU": 1, **ranks}  # and one core drives a cell's GPUs
    if spec.machine:
        demand[MACHINE_RESOURCE + spec.machine] = 0.001  # a sliver, as Ray's own accelerator_type= asks
    return demand


class NoNodeLeft(Exception):
    """No node of the cluster can take the cell any more, and none joined in time."""


def _lost(spec: CellSpec, exc: Exception) -> CellRecord:
    return CellRecord.for_spec(spec, FAILED, f"lost on the Ray cluster: {describe_error(exc, limit=300)}")
