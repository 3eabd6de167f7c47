"""`amp-suite sync` and `amp-suite ui`: the MLflow side of run folders."""

from __future__ import annotations

import ipaddress
import os
from contextlib import closing
from pathlib import Path
from typing import Annotated, Optional

import typer

from amp_suite.analysis.outcome import ExitCode
from amp_suite.cli.common import MLFLOW_HTTP_DEFAULTS, app, console, errors, fail, folder, say, warn
from amp_suite.config import ConfigError
from amp_suite.files import RefusedFile, open_regular
from amp_suite.paths import check_path, is_file, shown
from amp_suite.records.rundir import RunDirectory, append_to
from amp_suite.text import printable
from amp_suite.tracking.uri import check_tracking_store, embedded_store_uri, sqlite_uri, ui_link


@app.command()
def sync(
    run_dirs: Annotated[
        list[Path], typer.Argument(parser=folder, help="Run folders (each with results.jsonl).", show_default=False)
    ],
    tracking_uri: Annotated[
        Optional[str],
        typer.Option(envvar="MLFLOW_TRACKING_URI", help="MLflow store [default: each folder's own mlflow.db]"),
    ] = None,
) -> None:
    """Upload run folders' records into MLflow: what an outage missed, or several boxes into one server.

    Idempotent: records already there are left alone, so a second sync adds nothing."""
    try:
        if tracking_uri is not None:
            check_tracking_store(tracking_uri)  # port, scheme, driver: before MLflow loads
        for folder in run_dirs:  # every folder, before any is synced
            check_path(folder)  # a loop, a name too long, /proc and the like
            # Before MLflow loads: records that are not regular files, a store that is a link or a FIFO.
            RunDirectory(folder).check_syncable()
            if not any(is_file(folder / name) for name in ("results.jsonl", "invocations.jsonl")):
                raise ConfigError(f"{shown(folder)}: not a run folder (no results.jsonl or invocations.jsonl)")
    except ConfigError as exc:
        raise fail(str(exc)) from None
    for key, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    for folder in run_dirs:
        _sync_folder(RunDirectory(folder), tracking_uri)


def _sync_folder(directory: RunDirectory, tracking_uri: str | None) -> None:
    from contextlib import nullcontext

    from amp_suite.records.results import describe_error
    from amp_suite.tracking.logs import route_store_logs
    from amp_suite.tracking.mlflow_store import MlflowStore
    from amp_suite.tracking.relocate import ARTIFACTS
    from amp_suite.tracking.sync import SyncReport, sync_run_dir

    uri = tracking_uri or embedded_store_uri(directory.path)
    # The folder's own store keeps its artifacts in the folder, wherever it was copied from.
    own_artifacts = directory.path / ARTIFACTS if tracking_uri is None else None
    # A folder gathered read-only can't be written by a run either: there is nothing to lock.
    writable = os.access(directory.path, os.W_OK)
    report = SyncReport()
    route_store_logs(directory.path / "logs" / "tracking.log" if writable else None, tracking_uri)
    try:
        with directory.locked("amp-suite sync") if writable else nullcontext():
            store = MlflowStore(uri, own_artifacts)
            store.check_reachable()
            with store.exclusive():  # a second sync of the same records waits, then finds them there
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
    for problem in report.problems():
        warn(f"{directory.path}: {problem}")


@app.command()
def ui(
    ctx: typer.Context,
    out: Annotated[
        Path, typer.Option(envvar="AMP_SUITE_OUT", parser=folder, help="The --out folder of an earlier run.")
    ] = Path("runs"),
    store: Annotated[
        Optional[Path],
        typer.Option(help="Any MLflow SQLite store file to serve instead of <out>/mlflow.db.", show_default=False),
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to bind; keep 127.0.0.1 unless behind auth.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port for the UI.")] = 5000,
) -> None:
    """Open the MLflow UI on the embedded store of an earlier run, or on any SQLite store (--store)."""
    try:
        if store is not None:
            given = ctx.get_parameter_source("out")  # click's ParameterSource: its own copy under Typer 0.2x
            if given is not None and given.name == "COMMANDLINE":
                raise ConfigError("--out and --store: choose one (--store serves that file, not a run folder's store)")
            check_sqlite_store(store)
        else:
            check_path(out, "--out")
            RunDirectory(out).check_syncable("ui")  # it writes logs/ui.log and repoints the store: no links
    except ConfigError as exc:
        raise fail(str(exc)) from None
    served = store if store is not None else out / "mlflow.db"
    if store is None and not is_file(served):
        missing = f"no MLflow store at {shown(served)}; run `amp-suite run --out {shown(out)}` first"
        raise fail(f"--out {shown(out)}: {missing}")
    if not _is_loopback(host):
        errors.print(
            f"amp-suite: warning: serving {served} on {host}:{port} without authentication: anyone who can reach"
            " that port can read, change and delete every run. Keep --host 127.0.0.1 (in a container, publish the"
            " port on the host's loopback only: -p 127.0.0.1:5000:5000), or use docker/compose.yaml's server,"
            " which requires a login.",
            highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
    if store is None:
        _pin_artifacts(RunDirectory(out))  # a run folder's own store keeps its artifacts in the folder
    _serve(sqlite_uri(served.resolve()), out if store is None else None, host, port)


# The first 16 bytes of every SQLite 3 database file (sqlite.org/fileformat.html).
SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_store(path: Path) -> None:
    """--store names a regular file that is a SQLite database: anything else is one line here, not
    an MLflow server that starts and then fails, or creates an empty store where a path was mistyped."""
    check_path(path, "--store")
    try:
        with open_regular(path) as handle:  # a FIFO or a device is refused without a read that could wait
            if handle is None:
                raise ConfigError(f"--store {shown(path)}: no such file")
            header = handle.read(len(SQLITE_HEADER))
    except RefusedFile as exc:
        raise ConfigError(f"--store {exc}") from None
    if header != SQLITE_HEADER:
        raise ConfigError(f"--store {shown(path)}: not a SQLite database (an MLflow store is one, e.g. mlflow.db)")
    if not _has_table(path, "experiments"):  # MLflow would write its tables into another program's database
        raise ConfigError(f"--store {shown(path)}: a SQLite database, but not an MLflow store (no experiments table)")


def _has_table(database: Path, table: str) -> bool:
    """Whether the SQLite database has the table, read without writing (read-only, no journal made)."""
    import sqlite3

    try:
        with closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as connection:
            found = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
            return found.fetchone() is not None
    except sqlite3.Error as exc:
        raise ConfigError(f"--store {shown(database)}: can't be read as a SQLite database ({exc})") from None


def _serve(store_uri: str, out: Path | None, host: str, port: int) -> None:
    """The MLflow UI until Ctrl-C (exit 130) or a stop signal; exit 2 if it can't start or stops.
    Its log goes into <out>/logs for a run folder's store, else into a temporary file."""
    import tempfile

    from amp_suite.signals import signal_of, stop_on_signals
    from amp_suite.tracking.ui_server import UiServer, UiServerError

    try:
        UiServer.check_port(host, port)
    except UiServerError as exc:
        raise fail(str(exc)) from None
    log = _ui_log(out) or tempfile.NamedTemporaryFile(prefix="amp-suite-ui-", suffix=".log")
    server = UiServer(store_uri, host, port, log)
    try:
        with log, stop_on_signals():
            try:
                server.start()
                server.wait_until_serving()
                _announce(f"http://{host}:{port}", server.experiments())
                server.wait()
            finally:
                server.stop()
    except UiServerError as exc:
        kept = out is not None and Path(log.name).parent == out / "logs"  # a temporary log is gone by now
        raise fail(f"{exc} (its log: {log.name})" if kept else str(exc)) from None
    except KeyboardInterrupt as exc:
        raise typer.Exit(128 + signal_of(exc)) from None


def announced_links(base: str, experiments: list[tuple[str, str]]) -> list[str]:
    """What `ui` prints once the server answers: the newest experiment's runs in the suite's saved
    view (precisions side by side, the verdict's columns), then each other experiment's, by name;
    the experiments list where the store holds no runs. Every link opens MLflow 3's model-training
    mode, not the GenAI view it opens in unless told otherwise."""
    if not experiments:
        return [f"MLflow UI on {ui_link(base)} (Ctrl-C to stop)"]
    (first_id, first_name), *others = experiments
    lines = [f"MLflow UI on {ui_link(base, first_id)} (Ctrl-C to stop; experiment {first_name})"]
    return lines + [f"  experiment {name}: {ui_link(base, experiment_id)}" for experiment_id, name in others]


def _announce(base: str, experiments: list[tuple[str, str]]) -> None:
    for line in announced_links(base, experiments):  # soft-wrapped: a link folded by rich can't be clicked
        console.print(printable(line), highlight=False, markup=False, soft_wrap=True)


def _ui_log(out: Path | None):
    """<out>/logs/ui.log for the server's output, or None where the folder is read-only or there is
    no run folder (--store)."""
    if out is None:
        return None
    try:
        (out / "logs").mkdir(exist_ok=True)
        return append_to(out / "logs" / "ui.log")
    except OSError:
        return None


def _pin_artifacts(directory: RunDirectory) -> None:
    """The store must keep its artifacts in the folder before the UI serves them: a moved or
    gathered folder's store points at the old path, an edited one anywhere (the UI would serve
    whatever file it names). One line, exit 2, for a store that can't be opened or repointed.
    A run in progress holds the folder, and its paths are current: nothing to do then."""
    from contextlib import nullcontext

    from amp_suite.records.rundir import OutDirBusy
    from amp_suite.tracking.relocate import ARTIFACTS, pin_artifacts

    writable = os.access(directory.path, os.W_OK)  # read-only: no lock to take, and a stray store is refused
    try:
        with directory.locked("amp-suite ui") if writable else nullcontext():
            moved = pin_artifacts(directory.path / "mlflow.db", directory.path / ARTIFACTS)
    except OutDirBusy:
        return
    except ConfigError as exc:  # not a database; a read-only folder whose store points elsewhere
        raise fail(str(exc)) from None
    if moved:
        say(f"{directory.path} was moved: pointed {moved} experiment(s)' artifacts at {directory.path / ARTIFACTS}")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
