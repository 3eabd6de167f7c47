from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = REPO / "experiments"

# Nothing in the suite may wait on a model/dataset hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# Files whose module-scoped fixtures run real matrices: with the workers of `make test` and `make
# test-slow` (pytest-xdist, --dist loadgroup) each such file stays on one worker, so its fixtures run once.
SHARED_FIXTURES = {
    "test_hostile_files.py", "test_hostile_text.py", "test_hostile_readers.py", "test_hostile_cli.py",
    "test_hostile_stores.py", "test_deploy.py", "test_cli.py", "test_reliability.py", "test_tracking_server.py",
}  # fmt: skip
# `make test-slow` runs these after the rest, on their own (make test leaves them out): a local Ray
# cluster's scheduling waits time out when the other workers keep the machine busy, and the
# benchmarks and the smoke matrix's time budget measure the machine, which must not be shared while
# they do (beside a worker, a lockstep pair's suite side ran 2.7x as fast as its bare side), nor
# while the busy-machine test's hog runs.
ALONE = {"test_fleet.py", "test_smoke.py", "test_bench_overhead.py", "test_busy_machine.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups and -m selects by the marks added here
def pytest_collection_modifyitems(config, items):
    """The end-to-end files first (each test runs the CLI: seconds, where a unit test takes
    milliseconds), so that the workers finish together instead of waiting on the last one; within a
    file the order stays as written (some tests rely on running last)."""
    for item in items:
        if item.path.name in SHARED_FIXTURES:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
        if item.path.name in ALONE:
            item.add_marker(pytest.mark.alone)
    items.sort(key=lambda item: "e2e" not in item.path.parts)  # a stable sort


def pytest_collection_finish(session):
    """A worker of `make test` or `make test-slow` (--dist loadgroup) whose files of shared fixtures lost their group
    would run their matrices on both workers, unnoticed but for the time: refuse to go on."""
    if session.config.getoption("loadgroup", False):  # what xdist sets on a worker for --dist loadgroup
        shared = [item.nodeid for item in session.items if item.path.name in SHARED_FIXTURES]
        if ungrouped := [nodeid for nodeid in shared if "@" not in nodeid]:
            raise pytest.UsageError(f"xdist ignored the xdist_group of {ungrouped[0]} (pytest-xdist issue 1386)")


def tiny_matrix(**overrides) -> dict:
    """A matrix small enough to run in seconds on a CPU."""
    matrix = {
        "name": "tiny",
        "seed": 0,
        "warmup_steps": 2,
        "steps": 4,
        # Timed on the schedule alone: a test that sets more steps must not run on for a stopping rule's
        # budget (the tests of sequential timing ask for it).
        "stopping": "fixed",
        "precisions": ["fp32", "tf32", "fp16", "bf16"],
        "workloads": [
            # bf16 runs on every CPU: forced (emulated) where the CPU has no native bf16, since the
            # machines CI lands on vary (an EPYC without avx512_bf16 skips it otherwise).
            {"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": [8], "samples": 64,
             "force": ["bf16"]},
        ],
    }
    matrix.update(overrides)
    return matrix


@pytest.fixture
def gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU; none is visible to PyTorch")


# -- the CLI as users run it: a subprocess, real files, a real MLflow store ------------------


# Under the workers of `make test` and `make test-slow` (pytest-xdist) two runs share the two cores. A cell with torch's
# default of a thread per core would then have its OpenMP threads spin-wait on each other, and a
# 1 ms step take 20-40 ms: one thread each keeps a cell at the speed of a quiet core. The tests that
# run alone (conftest.ALONE: the smoke matrix's time budget) keep torch's default, as users have it.
SHARED_CORES = {"OMP_NUM_THREADS": "1"} if os.environ.get("PYTEST_XDIST_WORKER") else {}


# `make test` and `make test-slow` measure line coverage in every Python process the suite starts: coverage's
# `patch = subprocess` hands its settings down in this variable, and a process that finds it traces
# itself. A test that holds a command to a time or memory budget runs it unmeasured (`measured=False`):
# the budget is the product's, as users run it, not the tracer's.
COVERAGE_HANDOFF = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")


def cli_env(env: dict[str, str] | None = None, measured: bool = True) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AMP_SUITE_"))}
    if not measured:
        clean = {k: v for k, v in clean.items() if k not in COVERAGE_HANDOFF}
    return SHARED_CORES | clean | (env or {})


def amp_suite(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 600, measured: bool = True):
    """Run the CLI to completion (embedded store unless --tracking-uri is given)."""
    command = [sys.executable, "-m", "amp_suite", *args]
    env = cli_env(env, measured)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def start_amp_suite(
    *args: str, cwd: Path, env: dict[str, str] | None = None, measured: bool = True
) -> subprocess.Popen:
    """Start the CLI and return at once, for tests that signal or race it."""
    command = [sys.executable, "-m", "amp_suite", *args]
    return subprocess.Popen(
        command, cwd=cwd, env=cli_env(env, measured), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def read_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def assert_one_step_figure(records: list[dict]) -> None:
    """Throughput and step time are one figure (issue 53): every device's samples per step, within 2%."""
    for record in (r for r in records if r["status"] == "ok"):
        samples = record["batch_size"] * (record.get("world_size") or 1)
        product = record["throughput"] * record["step_time_ms"] / 1e3
        assert abs(product / samples - 1) < 0.02, (record["cell_id"], product, samples)


def predict_rows(stdout: str) -> list[list[str]]:
    """The rows of each of `amp-suite predict`'s tables, cell by cell: the lines under a header's rule
    (indented, as a line said is not), whose cells stand two spaces or more apart (a cell holds single
    spaces: "mlp, compiled"); a row's wrapped continuation, with a cell or two, is not a row."""
    rows, under_rule = [], False
    for line in stdout.splitlines():
        if line.strip() and set(line.strip()) == {"─"}:
            under_rule = True
            continue
        under_rule = under_rule and line.startswith(" ")
        cells = re.split(r" {2,}", line.strip())
        if under_rule and len(cells) > 3:
            rows.append(cells)
    return rows


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def process_alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def runs_in(tracking_uri: str, experiment: str) -> tuple[list, list]:
    """(parent runs, child runs) of an experiment, read with MLflow's own client."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return [], []
    runs = client.search_runs([found.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def embedded(out: Path) -> str:
    return f"sqlite:///{out / 'mlflow.db'}"


def nested_runs(out: Path, experiment: str) -> tuple[list, list]:
    """(parent runs, child runs) of an experiment in a run folder's own store."""
    return runs_in(embedded(out), experiment)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class MlflowServer:
    """A real `mlflow server` on loopback, over a store that outlives it (so it can be restarted)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> str:
        port = free_port()
        command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                   "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
                   "--artifacts-destination", str(self.root / "artifacts"), "--workers", "1"]  # fmt: skip
        log = (self.root / "server.log").open("a")
        # Without MLflow's GenAI job runner: seven processes that each import MLflow, for features a
        # training-run store never uses (amp_suite.tracking.ui_server says the same for `amp-suite ui`).
        self.process = subprocess.Popen(command, cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                        env=os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
                                        start_new_session=True)  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2)
                return self.url
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    pytest.fail(f"mlflow server did not start: {(self.root / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)

    def kill(self) -> None:
        """The whole server (gunicorn/uvicorn workers included) dies at once, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=30)


@pytest.fixture
def mlflow_server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("server"))
    yield server
    server.kill()


@pytest.fixture
def small_mount(tmp_path):
    """A tmpfs of `size` (root mounts it; CI runs as root) at a path inside tmp_path."""
    mounted = []

    def mount(path: Path, size: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)
