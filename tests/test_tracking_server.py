"""A matrix logged over HTTP into a real `mlflow server` on loopback, then read back."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from conftest import tiny_matrix
from test_cli_integration import amp_suite, read_records

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("server")
    port = _free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
               "--backend-store-uri", f"sqlite:///{root / 'server.db'}",
               "--artifacts-destination", str(root / "artifacts"), "--workers", "1"]  # fmt: skip
    log = (root / "server.log").open("w")
    server = subprocess.Popen(command, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
    yield url
    server.terminate()
    server.wait(timeout=30)
    log.close()


def test_matrix_logs_every_cell_as_a_nested_run_over_http(tracking_server, tmp_path):
    from mlflow import MlflowClient

    matrix = tmp_path / "tiny.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix(name="over-http", precisions=["fp32", "bf16"])))
    out = tmp_path / "out"
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--tracking-uri", tracking_server, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (out / "mlflow.db").exists()  # nothing went to the embedded store

    client = MlflowClient(tracking_uri=tracking_server)
    experiment = client.get_experiment_by_name("over-http")
    runs = client.search_runs([experiment.experiment_id])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {r.info.run_id: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    records = read_records(out)
    assert {r["mlflow_run_id"] for r in records} == set(children)
    for record in records:
        child = children[record["mlflow_run_id"]]
        assert child.data.tags["mlflow.parentRunId"] == parent[0].info.run_id
        if record["status"] == "ok":
            assert child.data.metrics["throughput"] == pytest.approx(record["throughput"])
            assert child.data.metrics["val_metric"] == pytest.approx(record["val_metric"])
            history = client.get_metric_history(child.info.run_id, "train_loss")
            assert len(history) == record["steps"]
    artifacts = {a.path for a in client.list_artifacts(parent[0].info.run_id)}
    assert {"matrix.yaml", "summary.json"} <= artifacts  # proxied through the server's artifact store


def test_an_unreachable_server_is_a_clear_error_before_any_cell_runs(tmp_path):
    port = _free_port()  # nothing listens there
    matrix = tmp_path / "tiny.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix()))
    env_retries = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(tmp_path / "out"),
                     "--tracking-uri", f"http://127.0.0.1:{port}", cwd=tmp_path, env=env_retries)  # fmt: skip
    assert done.returncode == 2
    assert "MLflow store http://127.0.0.1:" in done.stderr and "not usable" in done.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()
