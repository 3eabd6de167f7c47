"""`amp-suite sync` and `amp-suite ui`: the MLflow side of run folders."""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from amp_suite.cli.common import MLFLOW_HTTP_DEFAULTS, app, errors, fail, say
from amp_suite.config import ConfigError
from amp_suite.outcome import ExitCode
from amp_suite.rundir import RunDirectory
from amp_suite.tracking.uri import check_tracking_uri, embedded_store_uri


@app.command()
def sync(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders (each with results.jsonl).", show_default=False)],
    tracking_uri: Annotated[
        Optional[str],
        typer.Option(envvar="MLFLOW_TRACKING_URI", help="MLflow store [default: each folder's own mlflow.db]"),
    ] = None,
) -> None:
    """Upload run folders' records into MLflow: what an outage missed, or several boxes into one server.

    Idempotent: records already there are left alone, so a second sync adds nothing."""
    try:
        if tracking_uri is not None:
            check_tracking_uri(tracking_uri)
        for folder in run_dirs:
            if not any((folder / name).is_file() for name in ("results.jsonl", "invocations.jsonl")):
                raise ConfigError(f"{folder}: not a run folder (no results.jsonl or invocations.jsonl)")
    except ConfigError as exc:
        raise fail(str(exc)) from None
    for key, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    for folder in run_dirs:
        _sync_folder(RunDirectory(folder), tracking_uri)


def _sync_folder(directory: RunDirectory, tracking_uri: str | None) -> None:
    from contextlib import nullcontext

    from amp_suite.results import describe_error
    from amp_suite.tracking.mlflow_store import MlflowStore
    from amp_suite.tracking.sync import SyncReport, sync_run_dir

    uri = tracking_uri or embedded_store_uri(directory.path)
    # A folder gathered read-only can't be written by a run either: there is nothing to lock.
    writable = os.access(directory.path, os.W_OK)
    report = SyncReport()
    try:
        store = MlflowStore(uri)
        store.check_reachable()
        with directory.locked("amp-suite sync") if writable else nullcontext():
            sync_run_dir(directory, store, report)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        if not report.wrote_anything:  # e.g. not an MLflow server, or a store that won't open
            raise fail(f"tracking store {uri} is not usable: {describe_error(exc)}") from None
        # What was synced stays, and sync can simply run again.
        stopped = f"sync of {directory.path} into {uri} stopped: {describe_error(exc)}"
        raise fail(stopped, ExitCode.WRITE_FAILED) from None
    say(f"{directory.path} -> {uri}: {report.describe()}")


@app.command()
def ui(
    out: Annotated[Path, typer.Option(envvar="AMP_SUITE_OUT", help="The --out folder of an earlier run.")] = Path(
        "runs"
    ),
    host: Annotated[str, typer.Option(help="Interface to bind; keep 127.0.0.1 unless behind auth.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port for the UI.")] = 5000,
) -> None:
    """Open the MLflow UI on the embedded store of an earlier run."""
    store = out / "mlflow.db"
    if not store.is_file():
        raise fail(f"--out {out}: no MLflow store at {store}; run `amp-suite run --out {out}` first")
    if not _is_loopback(host):
        errors.print(
            f"amp-suite: warning: serving {store} on {host}:{port} without authentication: anyone who can reach"
            " that port can read, change and delete every run. Keep --host 127.0.0.1 (in a container, publish the"
            " port on the host's loopback only: -p 127.0.0.1:5000:5000), or use docker/compose.yaml's server,"
            " which requires a login.",
            highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
    _relocate_artifacts(RunDirectory(out))
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", embedded_store_uri(out)]
    command += ["--host", host, "--port", str(port)]
    # MLflow 3's UI opens in its GenAI view unless told otherwise; this link opens model training.
    say(f"MLflow UI on http://{host}:{port}/#/experiments?workflowType=machine_learning (Ctrl-C to stop)")
    os.execv(sys.executable, command)


def _relocate_artifacts(directory: RunDirectory) -> None:
    """A moved or gathered folder's store still points at the old artifact path: repoint it.
    A run in progress holds the folder, and its paths are current: nothing to do then."""
    from amp_suite.rundir import OutDirBusy
    from amp_suite.tracking.relocate import relocate_artifacts

    try:
        with directory.locked("amp-suite ui"):
            moved = relocate_artifacts(directory.path / "mlflow.db")
    except OutDirBusy:
        return
    except ConfigError as exc:  # e.g. a read-only folder: the UI still shows runs and metrics
        errors.print(f"amp-suite: warning: artifacts not relocated: {exc}", highlight=False, markup=False)
        return
    if moved:
        say(f"{directory.path} was moved: pointed {moved} experiment(s)' artifacts at {directory.path / 'mlartifacts'}")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
