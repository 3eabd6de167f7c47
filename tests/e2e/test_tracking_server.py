"""A real `mlflow server` on loopback: logging over HTTP, failing fast, outages, and sync.

One server serves the file (the outage test kills it and starts it again on the same store).
The matrix the outage test runs is first run, whole, over HTTP while the server stays up: that
run is what the HTTP test checks, and the yardstick for what an outage costs."""

from __future__ import annotations

import math
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import MlflowServer, amp_suite, free_port, read_records, runs_in, start_amp_suite, tiny_matrix, wait_for

pytestmark = pytest.mark.slow

OUTAGE_MATRIX = tiny_matrix(  # three cells: the server dies after two, one more runs past the outage
    name="outage",
    precisions=["fp32"],
    workloads=[
        {"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": [8, 16], "samples": 64},
        {"workload": "mlp", "label": "wild", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": [8],
         "samples": 64, "lr": 1.0e6},
    ],  # fmt: skip
    expect=[{"workload": "wild", "precision": "fp32", "status": "diverged"}],
)


# Tracking is what these tests are about, not the device: `--device cpu` spares each run's own
# process the seconds of importing torch that asking for CUDA costs (the cells load it anyway).
CPU = ("--device", "cpu")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real `mlflow server` for the whole file (conftest.mlflow_server, module-scoped)."""
    server = MlflowServer(tmp_path_factory.mktemp("server"))
    yield server
    server.kill()


def _up(server: MlflowServer) -> str:
    """The server's URL, started (again) if it is not running."""
    if server.process is None or server.process.poll() is not None:
        return server.start()
    return server.url


@dataclass
class Logged:
    done: subprocess.CompletedProcess
    out: Path
    seconds: float


@pytest.fixture(scope="module")
def over_http(server, tmp_path_factory) -> Logged:
    """The outage matrix (as experiment "over-http") logged over HTTP, the server up throughout."""
    folder = tmp_path_factory.mktemp("over-http")
    matrix = folder / "over-http.yaml"
    matrix.write_text(yaml.safe_dump({**OUTAGE_MATRIX, "name": "over-http"}))
    url = _up(server)
    started = time.monotonic()
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(folder / "out"), "--tracking-uri", url, *CPU,
                     cwd=folder)  # fmt: skip
    return Logged(done, folder / "out", time.monotonic() - started)


def test_matrix_logs_every_cell_as_a_nested_run_over_http(server, over_http):
    from mlflow import MlflowClient

    done, out = over_http.done, over_http.out
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (out / "mlflow.db").exists()  # nothing went to the embedded store

    url = _up(server)
    client = MlflowClient(tracking_uri=url)
    parent, children = runs_in(url, "over-http")
    children = {r.info.run_id: r for r in children}
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    records = read_records(out)
    assert len(records) == 3 and {r["status"] for r in records} == {"ok", "diverged"}
    assert {r["tracker_run_id"] for r in records} == set(children)
    for record in records:
        child = children[record["tracker_run_id"]]
        assert child.data.tags["mlflow.parentRunId"] == parent[0].info.run_id
        assert child.data.tags["amp_suite.record_id"] == record["record_id"]
        assert child.data.tags["amp_suite.complete"] == "true"
        if record["status"] == "ok":
            assert child.data.metrics["throughput_samples_per_s"] == pytest.approx(record["throughput"])  # the MLP's
            assert child.data.metrics[record["val_metric_name"]] == pytest.approx(record["val_metric"])
            history = client.get_metric_history(child.info.run_id, "train_loss")
            assert len(history) == record["steps"]
    artifacts = {a.path for a in client.list_artifacts(parent[0].info.run_id)}
    assert {"matrix.yaml", "summary.json"} <= artifacts  # proxied through the server's artifact store


def _unreachable(tmp_path, uri: str):
    matrix = tmp_path / "tiny.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix()))
    started = time.monotonic()
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(tmp_path / "out"), "--tracking-uri", uri,
                     cwd=tmp_path, timeout=120, measured=False)  # fmt: skip
    return done, time.monotonic() - started


def test_a_refused_connection_fails_in_seconds_with_one_line_naming_the_store(tmp_path):
    port = free_port()  # nothing listens there
    done, elapsed = _unreachable(tmp_path, f"http://admin:s3cret@127.0.0.1:{port}")
    assert done.returncode == 2 and elapsed < 15, (done.returncode, elapsed)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"tracking store http://admin:***@127.0.0.1:{port} is not usable" in done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    assert not (tmp_path / "out").exists()  # checked before anything was written


def test_a_server_that_accepts_but_never_answers_fails_in_seconds(tmp_path):
    with socket.socket() as silent:  # the kernel completes the handshake; nobody ever replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        done, elapsed = _unreachable(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}")
    assert done.returncode == 2 and elapsed < 15, (done.returncode, elapsed)
    assert "is not usable" in done.stderr and "timed out" in done.stderr


def test_a_server_that_dies_mid_matrix_costs_seconds_and_sync_fills_it_in_once(server, over_http, tmp_path):
    from mlflow import MlflowClient

    matrix = tmp_path / "outage.yaml"
    matrix.write_text(yaml.safe_dump(OUTAGE_MATRIX))
    # The reference: the same matrix over HTTP with the server up throughout (the over_http run).
    assert over_http.done.returncode == 0, over_http.done.stdout + over_http.done.stderr
    reference_s = over_http.seconds

    url = _up(server)
    out = tmp_path / "out"
    started = time.monotonic()
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--tracking-uri", url, *CPU, cwd=tmp_path)
    wait_for(lambda: (out / "results.jsonl").exists() and len(read_records(out)) >= 2, 120, "two records")
    server.kill()
    stdout, stderr = run.communicate(timeout=300)
    outage_s = time.monotonic() - started
    assert run.returncode == 0, stdout + stderr  # the tracker is a mirror: its outage changes no verdict
    assert outage_s < reference_s + 20, (outage_s, reference_s)
    assert stdout.count("tracking: could not") == 1 and f"amp-suite sync {out} --tracking-uri {url}" in stdout
    records = read_records(out)
    assert len(records) == 3 and {r["status"] for r in records} == {"ok", "diverged"}

    url = server.start()  # back, on the same store
    first = amp_suite("sync", str(out), "--tracking-uri", url, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    parents, children = runs_in(url, "outage")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["outcome"] == "as expected"
    assert sorted(c.data.tags["amp_suite.record_id"] for c in children) == sorted(r["record_id"] for r in records)
    assert {c.info.status for c in children} == {"FINISHED", "FAILED"}  # nothing left RUNNING
    diverged = next(c for c in children if c.data.tags["status"] == "diverged")
    assert any(math.isnan(v) or math.isinf(v) for v in diverged.data.metrics.values())  # NaN survives HTTP

    client = MlflowClient(tracking_uri=url)
    history = {c.info.run_id: len(client.get_metric_history(c.info.run_id, "train_loss")) for c in children}
    second = amp_suite("sync", str(out), "--tracking-uri", url, cwd=tmp_path)
    said = " ".join(second.stdout.split())  # the summary line wraps where the terminal width says
    assert second.returncode == 0 and "0 added, 0 completed, 3 already there" in said, second.stdout
    assert [len(group) for group in runs_in(url, "outage")] == [1, 3]
    assert history == {c: len(client.get_metric_history(c, "train_loss")) for c in history}
