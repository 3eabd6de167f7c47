"""`amp-suite run --ray`: a real Ray cluster on loopback, a head and a worker node, the worker
offering the resource Ray gives a node by its GPU model (accelerator_type:A100) and two GPUs it
does not have, standing in for an A100 box. The cells run on the CPU of that node, through the CLI
as users run it. An address where no cluster answers needs no cluster, nor the machine to itself:
tests/e2e/test_fleet_address.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import amp_suite, embedded, free_port, read_records, runs_in, start_amp_suite, tiny_matrix, wait_for

from amp_suite.config import Matrix
from amp_suite.execution import fleet

pytest.importorskip("ray")

RAY = shutil.which("ray", path=str(Path(os.sys.executable).parent))


class LocalRayCluster:
    """`ray start` twice: a head that runs nothing (0 CPUs, 0 GPUs) and a worker node in a session
    of its own, so that it can be killed outright, as a lost box is. Ray takes the worker's GPU
    count on trust: it hands out ids 0 and 1 and sets CUDA_VISIBLE_DEVICES per task as on a GPU box."""

    def __init__(self) -> None:
        self.port = free_port()
        self.temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        self.worker: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalRayCluster:
        head = [RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(self.port)]
        head += ["--num-cpus", "0", "--num-gpus", "0", "--include-dashboard", "false", "--disable-usage-stats"]
        head += ["--temp-dir", self.temp]
        subprocess.run(head, env=self.env, check=True, capture_output=True, timeout=120)
        worker = [RAY, "start", "--address", self.address, "--node-ip-address", "127.0.0.1", "--num-cpus", "2"]
        worker += ["--num-gpus", "2", "--resources", json.dumps({"accelerator_type:A100": 1}), "--block"]
        self.worker = subprocess.Popen(
            worker, env=self.env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(self._worker_joined, 60, "the worker node to join")
        return self

    def _worker_joined(self) -> bool:
        """The head has no CPUs: two in the cluster means the worker node is in."""
        status = [RAY, "status", "--address", self.address]
        return "/2.0 CPU" in subprocess.run(status, env=self.env, capture_output=True, text=True).stdout

    def kill_worker(self) -> None:
        os.killpg(self.worker.pid, signal.SIGKILL)  # the node, its raylet, its workers and their cells
        self.worker.wait()

    def worker_cells(self) -> list[psutil.Process]:
        """Cell processes on the worker node: children of a forkserver in its session."""
        return [
            process
            for process in psutil.process_iter(["cmdline"])
            if _session(process) == self.worker.pid and "forkserver" in _parent_command(process)
        ]

    def stop(self) -> None:
        if self.worker and self.worker.poll() is None:
            self.kill_worker()
        subprocess.run([RAY, "stop", "--force"], env=self.env, capture_output=True, timeout=120)
        shutil.rmtree(self.temp, ignore_errors=True)


def _parent_command(process: psutil.Process) -> str:
    """The parent's command line; "" where it has ended (a zombie, or gone) since the listing."""
    try:
        parent = process.parent()
        return " ".join(parent.cmdline() or []) if parent else ""
    except psutil.Error:
        return ""


def _session(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except OSError:
        return None


@pytest.fixture(scope="module")
def cluster():
    """One cluster for the module (starting one takes ~13 s, stopping it ~7 s); the test that kills
    its worker node comes last."""
    cluster = LocalRayCluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _matrix(tmp_path: Path, **overrides) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(**overrides)))
    return path


@pytest.mark.slow
def test_a_matrix_runs_on_the_fleet_and_every_record_arrives_exactly_once(tmp_path, cluster):
    matrix = _matrix(tmp_path, precisions=["fp32", "bf16"], repeats=2, machines=["A100", "H100"])
    out = tmp_path / "out"
    result = amp_suite(
        "run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", "--ray", cluster.address, cwd=tmp_path
    )
    records = read_records(out)
    ids = [record["cell_id"] for record in records]
    assert len(ids) == len(set(ids)) == 8, result.stdout + result.stderr  # 2 types x 2 seeds x 2 precisions
    on_a100 = [r for r in records if r["cell_id"].endswith("on-A100")]
    on_h100 = [r for r in records if r["cell_id"].endswith("on-H100")]
    assert {r["status"] for r in on_a100} == {"ok"}
    assert all(r["environment"]["ray_node"] for r in on_a100)
    assert all(Path(r["log_path"]).is_file() for r in on_a100)  # the cell's log came home (its timed steps' bounds)
    # No H100 node: recorded as skipped with the reason, not missing and not waiting forever.
    assert {r["status"] for r in on_h100} == {"skipped"}
    assert all("no H100 node" in r["reason"] for r in on_h100)
    _, children = runs_in(embedded(out), "tiny")  # mirrored once each; the skipped set aside, off the table
    assert sorted(run.data.tags["cell_id"] for run in children) == sorted(r["cell_id"] for r in on_a100)


@pytest.mark.slow
def test_stopping_the_driver_cancels_the_cells_on_the_cluster(tmp_path, cluster):
    matrix = _matrix(tmp_path, precisions=["fp32", "bf16"], steps=500_000, machines=["A100"])
    out = tmp_path / "out"
    run = start_amp_suite(
        "run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", "--ray", cluster.address, cwd=tmp_path
    )
    try:
        wait_for(lambda: len(cluster.worker_cells()) >= 2, 120, "two cells running on the worker node")
        run.send_signal(signal.SIGTERM)  # as `docker stop` or Kubernetes would stop the driver
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 128 + signal.SIGTERM, stdout + stderr
    # Nothing finished: each started cell is kept as interrupted, never taken for a result.
    assert {r["status"] for r in read_records(out)} <= {"interrupted"}
    wait_for(lambda: not cluster.worker_cells(), 30, "the cells on the worker node to stop")


@pytest.mark.slow
def test_a_cell_sees_the_gpu_ray_gave_its_task_on_a_reused_worker_process(tmp_path, cluster, monkeypatch):
    """Ray reuses a task's worker process; the cell must not inherit the devices of an earlier
    task from the forkserver that task started. Placement groups pin which GPU each cell gets."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    spec = next(c for c in Matrix.model_validate(tiny_matrix(precisions=["fp32"])).cells("cpu"))
    monkeypatch.setattr(fleet, "_demand", lambda spec: {"CPU": 1, "GPU": 1})  # as a GPU cell asks, run on the CPU
    on_ray = fleet.Fleet(cluster.address)
    on_ray.connect()
    try:
        held = placement_group([{"GPU": 1}])  # one GPU taken: the first cell gets the other
        ray.get(held.ready(), timeout=60)
        first = on_ray.run(spec, tmp_path / "first.log", None)
        swapped = placement_group([{"GPU": 1}])  # the first cell's GPU, the only one free
        ray.get(swapped.ready(), timeout=60)
        remove_placement_group(held)  # the second cell gets the GPU the first one did not have
        second = on_ray.run(spec, tmp_path / "second.log", None)
        remove_placement_group(swapped)
    finally:
        on_ray.close()  # the job ends: Ray removes what it still holds
    assert (first.status, second.status) == ("ok", "ok"), (first.reason, second.reason)
    seen = [record.environment["cuda_visible_devices"] for record in (first, second)]
    assert sorted(seen) == ["0", "1"], seen  # each cell saw its own task's GPU


@pytest.mark.slow
def test_a_lost_worker_node_leaves_failed_records_not_gaps(tmp_path, cluster):  # last: the node stays dead
    matrix = _matrix(tmp_path, precisions=["fp32", "bf16"], repeats=2, steps=500_000, machines=["A100"])
    out = tmp_path / "out"
    run = start_amp_suite(
        "run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", "--ray", cluster.address,
        cwd=tmp_path, env={"AMP_SUITE_RAY_WAIT_S": "2"},
    )  # fmt: skip
    try:
        wait_for(lambda: len(cluster.worker_cells()) >= 2, 120, "two cells running on the worker node")
        cluster.kill_worker()
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    records = read_records(out)
    cells = [f"mlp/bs8/seed{seed}/{precision}/on-A100" for seed in (0, 1) for precision in ("fp32", "bf16")]
    assert sorted(r["cell_id"] for r in records) == sorted(cells)  # every cell, once
    assert {r["status"] for r in records} == {"failed"}, stdout + stderr
    assert all(r["reason"].startswith("lost on the Ray cluster") for r in records)
    assert run.returncode == 3  # failed cells: the matrix ended, with failures
