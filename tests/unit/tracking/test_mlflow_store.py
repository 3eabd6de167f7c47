"""The tracker interface's safety net, and tracking URIs: checked early, never shown with passwords."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, amp_suite

from amp_suite.config import ConfigError
from amp_suite.signals import STOP_SIGNALS, Stopped, stop_on_signals
from amp_suite.tracking import FailSafeTracker, TrackingError
from amp_suite.tracking.mlflow_store import MlflowStore
from amp_suite.tracking.uri import check_tracking_uri, mask_credentials


class FlakyTracker:
    """Fails from the n-th call on, and counts every call it gets."""

    def __init__(self, fail_from: int) -> None:
        self.calls = 0
        self.fail_from = fail_from

    def _call(self, *args):
        self.calls += 1
        if self.calls >= self.fail_from:
            raise ConnectionError("http://admin:hunter2@tracking:5000 refused the connection")
        return "run-id"

    start = close_orphans = start_cell = finish_cell = finish = abort = _call


class _Spec:
    cell_id = "mlp/bs8/seed0/fp32"


def test_after_one_failure_the_tracker_is_not_called_again_and_one_warning_says_how_to_catch_up():
    inner, warnings = FlakyTracker(fail_from=3), []
    tracker = FailSafeTracker(inner, warnings.append, "amp-suite sync runs --tracking-uri http://tracking:5000")
    tracker.start(None, None)
    assert tracker.start_cell(_Spec(), "r1") == "run-id"
    assert tracker.start_cell(_Spec(), "r2") is None  # the third call fails ...
    for _ in range(5):
        tracker.start_cell(_Spec(), "r3")
        tracker.finish(None, None, None)
    tracker.abort("interrupted", "stopped")
    assert inner.calls == 3  # ... and nothing after it reaches the dead store
    assert len(warnings) == 1
    assert "amp-suite sync runs" in warnings[0] and "hunter2" not in warnings[0] and "admin:***@" in warnings[0]


def test_a_failure_at_start_stops_the_run():
    tracker = FailSafeTracker(FlakyTracker(fail_from=1), lambda message: None, "sync")
    with pytest.raises(TrackingError, match="refused") as raised:
        tracker.start(None, None)
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    "text, masked",
    [
        ("http://admin:s3cret@host:5000/x", "http://admin:***@host:5000/x"),
        ("postgresql+psycopg2://mlflow:p@ss@db/mlflow", "postgresql+psycopg2://mlflow:***@db/mlflow"),
        ("error at https://u:p@h and https://v:q@i", "error at https://u:***@h and https://v:***@i"),
        ("http://host:5000 has no password", "http://host:5000 has no password"),
    ],
)
def test_credentials_are_masked_wherever_they_appear(text, masked):
    assert mask_credentials(text) == masked


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("ftp://host/x", "unsupported scheme 'ftp'"),
        ("file:///tmp/mlruns", "file store is deprecated"),
        ("./mlruns", "file store is deprecated"),
        ("http://", "no host"),
        ("sqlite:////no/such/folder/mlflow.db", "the folder /no/such/folder does not exist"),
        ("http://a b", "not a URI"),
        ("https://user:topsecret@" + "x" * 5000, "not a URI"),
    ],
)
def test_unusable_tracking_uris_are_one_line_errors(uri, expected):
    with pytest.raises(ConfigError, match=expected) as raised:
        check_tracking_uri(uri)
    assert "topsecret" not in str(raised.value) and len(str(raised.value)) < 400


@pytest.mark.parametrize("uri", ["http://127.0.0.1:5000", "https://mlflow.example.com", "postgresql://u:p@db/m"])
def test_usable_tracking_uris_pass(uri, tmp_path):
    assert check_tracking_uri(uri) == uri
    assert check_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")


class _Answers(http.server.BaseHTTPRequestHandler):
    status = 200
    paths: list[str] = []

    def do_GET(self):  # noqa: N802 (the http.server API)
        type(self).paths.append(self.path)
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.mark.parametrize("status", [200, 401])
def test_the_reachability_check_asks_health_without_credentials_and_any_answer_will_do(http_server, status):
    _Answers.status, _Answers.paths = status, []
    port = http_server.server_address[1]
    MlflowStore(f"http://admin:s3cret@127.0.0.1:{port}/prefix/").check_reachable()
    assert _Answers.paths == ["/prefix/health"]


def test_the_reachability_check_fails_fast_where_nothing_listens():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectionError, match="no MLflow server answers there .*refused"):
        MlflowStore(f"http://127.0.0.1:{port}").check_reachable()


class SignalledMidCall:
    """A tracker whose calls receive SIGTERM half-way, as a store does mid-commit."""

    def __init__(self) -> None:
        self.finished: list[str] = []

    def start(self, invocation, matrix) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the rest of the commit
        self.finished.append("start")

    def abort(self, ending, why) -> None:
        self.finished.append(f"abort after {ending}")


def test_a_stop_signal_waits_for_the_tracker_call_to_finish():
    inner = SignalledMidCall()
    tracker = FailSafeTracker(inner, lambda message: None, "sync")
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        with pytest.raises(Stopped), stop_on_signals():
            try:
                tracker.start(None, None)
            finally:
                tracker.abort("interrupted", "stopped by SIGTERM")
    finally:  # a stopped process ignores further stop signals on its way out; pytest goes on
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert inner.finished == ["start", "abort after interrupted"]


def test_a_new_store_starts_from_the_empty_one_mlflow_made_first_and_is_a_whole_store(tmp_path):
    """`sync` into two new folders: the first store MLflow makes from nothing is kept, emptied, in
    the cache; the second starts as a copy of it. Both hold their records, and MLflow's Default
    experiment of their own, deleted while empty; an unwritable cache changes nothing but the time."""
    from mlflow.entities import ViewType

    from mlflow import MlflowClient

    fixture = REPO / "tests" / "fixtures" / "results-2026-12-01.jsonl"
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache)}
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text(fixture.read_text())
        done = amp_suite("sync", str(tmp_path / name), cwd=tmp_path, env=env)
        said = " ".join(done.stdout.split())
        assert done.returncode == 0 and "5 added" in said and "1 skipped" in said, done.stdout + done.stderr
        kept = list((cache / "amp-suite").glob("mlflow-*-empty.db"))
        assert len(kept) == 1 and kept[0].stat().st_size > 0
        client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / name / 'mlflow.db'}")
        experiments = client.search_experiments()
        assert "Default" not in {e.name for e in experiments}  # the experiments list shows ours only
        assert "Default" in {e.name for e in client.search_experiments(ViewType.DELETED_ONLY)}  # not made anew
        assert len(client.search_runs([e.experiment_id for e in experiments])) == 6  # a parent and 5 cells that ran
    with sqlite3.connect(kept[0]) as connection:  # the cache holds no experiment, only the schema
        assert connection.execute("SELECT count(*) FROM experiments").fetchone() == (0,)

    unwritable = tmp_path / "not-a-folder"
    unwritable.write_text("a file where the cache folder would be")
    (tmp_path / "third").mkdir()
    (tmp_path / "third" / "results.jsonl").write_text(fixture.read_text())
    done = amp_suite("sync", str(tmp_path / "third"), cwd=tmp_path, env={"XDG_CACHE_HOME": str(unwritable)})
    assert done.returncode == 0 and "5 added" in " ".join(done.stdout.split()), done.stdout + done.stderr


class _Recorded:
    """A tracker opened for a scheme of its own (only its opening matters here)."""

    def __init__(self, uri: str, run_folder: Path | None) -> None:
        self.uri, self.run_folder = uri, run_folder


def _refuse(uri: str, run_folder: Path | None):
    raise RuntimeError("no such store")


def test_a_tracker_is_opened_by_its_uri_scheme_and_mlflow_takes_the_rest(monkeypatch, tmp_path):
    import amp_suite.tracking as tracking
    from amp_suite.tracking.mlflow_tracker import MlflowTracker

    monkeypatch.setitem(tracking.TRACKERS, "recorded", f"{__name__}:_Recorded")
    monkeypatch.setitem(tracking.TRACKERS, "refused", f"{__name__}:_refuse")
    opened = tracking.open_tracker("Recorded://team/box", run_folder=tmp_path)
    assert isinstance(opened, _Recorded) and (opened.uri, opened.run_folder) == ("Recorded://team/box", tmp_path)
    assert isinstance(tracking.open_tracker(f"sqlite:///{tmp_path / 'mlflow.db'}"), MlflowTracker)
    with pytest.raises(TrackingError, match="RuntimeError: no such store"):
        tracking.open_tracker("refused://x")
