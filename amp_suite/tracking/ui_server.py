"""`mlflow ui` run as a child that amp-suite watches, so that what `amp-suite ui` says is true.

Exec'ing into MLflow would hand it the process: a busy port would still print our "MLflow UI
on ..." line (the URL then showing someone else's server) and exit 0, and a stop signal would
leave its workers behind. Here the port is checked first, the address is announced only once
the server answers /health, a server that ends by itself ends the command with its reason, and
a stop signal takes the server's whole process group down before exiting 128+N.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

STARTUP_TIMEOUT_S = 120.0  # MLflow 3 takes 5-20 s to import and start on a small box
STOP_TIMEOUT_S = 10.0
POLL_S = 0.25
REQUEST_TIMEOUT_S = 10.0
MAX_EXPERIMENTS = 100  # the links printed: one store's matrices, newest first


class UiServerError(RuntimeError):
    """The server could not start, or stopped by itself; the message says why, in one line."""


# One person reviews one run folder's SQLite store: one worker serves that, where MLflow's default
# four import MLflow four times over (and write-contend on SQLite). Its job runner serves GenAI
# features (judges, prompt optimisation) a training-run store never asks for, and starts seven
# more processes that each import MLflow. Together: 8-14 s to the first page here, not 27-32 s.
WORKERS = 1
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


class UiServer:
    def __init__(self, store_uri: str, host: str, port: int, log: IO[bytes]) -> None:
        self.command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", store_uri,
                        "--host", host, "--port", str(port), "--workers", str(WORKERS)]  # fmt: skip
        self.host, self.port, self.log = host, port, log
        self.process: subprocess.Popen | None = None

    @staticmethod
    def check_port(host: str, port: int) -> None:
        """UiServerError if something already listens there: MLflow would fail, or worse, the URL
        would show another server."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:  # in use, or an address this box does not have
                why = "in use by another program" if exc.errno == errno.EADDRINUSE else exc.strerror
                raise UiServerError(f"--host {host} --port {port}: cannot serve there ({why})") from None

    def start(self) -> None:
        # Its own process group: a stop takes down MLflow's workers with it.
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            env=os.environ | SERVER_ENV, start_new_session=True,
        )  # fmt: skip

    @property
    def local_url(self) -> str:
        """Where this process reaches the server: a server on every interface is asked on loopback."""
        probe = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        return f"http://{f'[{probe}]' if ':' in probe else probe}:{self.port}"

    def wait_until_serving(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        health = f"{self.local_url}/health"
        while True:
            self._check_alive("did not start")
            try:
                urllib.request.urlopen(health, timeout=2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise UiServerError(f"the MLflow UI did not answer within {STARTUP_TIMEOUT_S:.0f} s") from None
                time.sleep(POLL_S)

    def experiments(self) -> list[tuple[str, str]]:
        """(id, name) of the experiments that hold runs, the one with the newest run first, as the
        serving store answers MLflow's REST API; [] where it does not answer so (the link then
        opens the experiments list)."""
        try:
            found = self._post("experiments/search", {"max_results": MAX_EXPERIMENTS}).get("experiments", [])
            newest = {e["experiment_id"]: self._newest_run(e["experiment_id"]) for e in found}
        except (OSError, ValueError, KeyError, TypeError):
            return []
        held = [e for e in found if newest[e["experiment_id"]] is not None]
        held.sort(key=lambda e: newest[e["experiment_id"]], reverse=True)
        return [(e["experiment_id"], e["name"]) for e in held]

    def _newest_run(self, experiment_id: str) -> int | None:
        """When the experiment's newest run started (ms), None if it holds none."""
        query = {"experiment_ids": [experiment_id], "max_results": 1, "order_by": ["attributes.start_time DESC"]}
        runs = self._post("runs/search", query).get("runs", [])
        return int(runs[0]["info"].get("start_time", 0)) if runs else None

    def _post(self, endpoint: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{self.local_url}/api/2.0/mlflow/{endpoint}", json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
            return json.loads(answer.read())

    def wait(self) -> None:
        """Until the server ends by itself (UiServerError) or a stop signal interrupts."""
        while True:
            self._check_alive("stopped")
            time.sleep(POLL_S)

    def stop(self) -> None:
        """The whole process group: SIGTERM, then SIGKILL after STOP_TIMEOUT_S."""
        if self.process is None or self.process.poll() is not None:
            return
        for signum, grace in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(self.process.pid):
                return

    def _check_alive(self, what: str) -> None:
        code = self.process.poll() if self.process is not None else None
        if code is not None:
            raise UiServerError(f"the MLflow UI {what} (exit {code}): {last_line(Path(self.log.name))}")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def last_line(log: Path) -> str:
    """The last non-blank line the server wrote (its error), bounded."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
            lines = [line.strip() for line in handle.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    return lines[-1][:300] if lines else "no output"
