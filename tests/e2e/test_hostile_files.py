"""Hostile and damaged run folders, through the CLI: files that are not files, lines no record
has, copies of folders, two users of one new store, a busy port, a disk that fills under the
report, a second stop signal. Each case failed before its fix (issue 20)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import (
    amp_suite,
    embedded,
    free_port,
    process_alive,
    read_records,
    runs_in,
    start_amp_suite,
    tiny_matrix,
    wait_for,
)
from support.refusals import assert_refused, run_measured

pytestmark = pytest.mark.slow

MLP = tiny_matrix()["workloads"][0]
SLOW = {**MLP, "samples": 256}  # with 3,000 steps a cell takes seconds: long enough to act mid-run
# A slow cell's torch computes on one thread. With torch's default (a thread per core) on a box
# that other processes keep busy, the threads wait on each other and a 1 ms step takes 20-30 ms:
# the cells' length would follow the load (a slow test here took two minutes), not the steps.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
# Runs that finish name the device: with auto, the CLI imports torch to look for a GPU before its
# cells' forkserver starts (a second or more per run); the cells here run on the CPU anyway.
CPU = ("--device", "cpu")


def _matrix(folder: Path, **overrides) -> Path:
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(name="hostile", **overrides)))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A run folder of one fp32 cell of a two-precision matrix (bf16 is left for --resume)."""
    root = tmp_path_factory.mktemp("finished")
    matrix = _matrix(root, precisions=["fp32", "bf16"])
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(root / "out"), "--precisions", "fp32", *CPU, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def _copy(finished: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(finished / "out", tmp_path / name))


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


# -- files that are not files, and lines that are not records ------------------------------------


@pytest.mark.parametrize("name", ["results.jsonl", "invocations.jsonl"])
@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "FIFO"])
def test_sync_refuses_a_record_file_that_is_not_a_regular_file(tmp_path, name, kind):
    out = tmp_path / "out"
    out.mkdir()
    other = "invocations.jsonl" if name == "results.jsonl" else "results.jsonl"
    (out / other).write_text("")  # the folder looks like a run folder
    if kind == "FIFO":
        os.mkfifo(out / name)
    else:
        os.symlink("/dev/zero", out / name)
    result = run_measured("sync", str(out), cwd=tmp_path)
    shown = "a FIFO" if kind == "FIFO" else "a character device"
    assert_refused(result, f"{out / name}: is {shown}, not a regular file")
    assert not (out / "mlflow.db").exists()  # refused before any store was made


def test_a_store_mlflow_cannot_open_is_one_line_not_a_traceback(finished, tmp_path):
    import sqlite3

    store = Path(shutil.copy(finished / "out" / "mlflow.db", tmp_path / "team.db"))
    with sqlite3.connect(store) as database:  # as if written by another MLflow version
        database.execute("UPDATE alembic_version SET version_num = 'deadbeef'")
    result = run_measured("report", "hostile", "--tracking-uri", f"sqlite:///{store}", cwd=tmp_path)
    assert_refused(result, "is not usable: MlflowException: Detected out-of-date database schema",
                   peak_mb=1024)  # fmt: skip  # MLflow has loaded by then


# -- a folder is self-contained wherever it moves --------------------------------------------------


def test_resume_in_a_copied_folder_skips_lines_no_record_has_and_writes_into_the_copy_only(finished, tmp_path):
    """One resumed run serves two cases (a run costs seconds of start-up): lines no record has are
    skipped by run --resume and by report, and a copied folder's run writes into the copy only."""
    original = finished / "out"
    before = _snapshot(original / "mlartifacts")
    out = _copy(finished, tmp_path)
    good = (out / "results.jsonl").read_text()
    record = json.loads(good)
    nan_ok = {**record, "record_id": "nan-ok", "throughput": "NaN"}  # claims ok, measured nothing
    hostile = [
        "[" * 100_000 + "]" * 100_000,  # RecursionError in the JSON parser
        json.dumps({"nested": json.loads("[" * 40 + "]" * 40)}),  # parses, deeper than any record
        json.dumps(nan_ok),
    ]
    (out / "results.jsonl").write_text("\n".join(hostile) + "\n" + good)
    matrix = _matrix(tmp_path, precisions=["fp32", "bf16"])  # fp32 is resumed; bf16 runs, in the copy
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--resume", *CPU, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "3 unreadable line(s)" in done.stdout, done.stdout
    assert "1 cell(s) already ok" in done.stdout  # the good record, not the NaN one
    bf16 = json.loads((out / "results.jsonl").read_text().splitlines()[-1])  # below the lines no parser reads
    assert bf16["precision"] == "bf16" and bf16["status"] == "ok", bf16
    assert (out / "mlartifacts").is_dir() and any((out / "mlartifacts").rglob("record.json"))
    assert bf16["tracker_run_id"] in {p.name for p in (out / "mlartifacts").rglob("*") if p.is_dir()}

    done = amp_suite("report", str(out), "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 unreadable line(s) or run(s) skipped" in done.stdout
    assert json.loads((out / "report" / "report.json").read_text())["records"] == 2  # fp32's and bf16's, not NaN's
    assert _snapshot(original / "mlartifacts") == before  # the original is untouched


def test_sync_in_a_copied_folder_writes_into_the_copy_only(finished, tmp_path):
    original = finished / "out"
    before = _snapshot(original / "mlartifacts")
    again = _copy(finished, tmp_path)  # a record the copy's store has not seen: sync adds it
    extra = {**read_records(again)[0], "record_id": "added-by-hand", "started_at": "2026-12-01T00:00:00+00:00"}
    with (again / "results.jsonl").open("a") as results:
        results.write(json.dumps(extra) + "\n")
    done = amp_suite("sync", str(again), cwd=tmp_path)
    assert done.returncode == 0 and "1 added" in done.stdout, done.stdout + done.stderr
    assert len(list((again / "mlartifacts").rglob("record.json"))) == 2
    assert _snapshot(original / "mlartifacts") == before  # the original is untouched


# -- one new store, two users at once --------------------------------------------------------------


def test_two_first_syncs_into_one_new_store_both_succeed_and_say_what_they_skipped(finished, tmp_path):
    """Two syncs at once into a store neither has made yet. Box-a's records also hold a line that
    is no record, a repeated record and a conflicting one: its sync says so and syncs the first."""
    folders = [_copy(finished, tmp_path, name) for name in ("box-a", "box-b")]
    line = (folders[0] / "results.jsonl").read_text()
    record = json.loads(line)
    conflicting = json.dumps({**record, "throughput": record["throughput"] * 100})  # same record_id
    with (folders[0] / "results.jsonl").open("a") as results:
        results.write("not json\n" + line + conflicting + "\n")
    for name in ("results.jsonl", "invocations.jsonl"):  # box-b's run is another run
        path = folders[1] / name
        text = path.read_text().replace(record["invocation_id"], "b" * 16)
        path.write_text(text.replace(record["record_id"], "b" * 16))
    store = f"sqlite:///{tmp_path / 'new.db'}"
    syncs = [start_amp_suite("sync", str(folder), "--tracking-uri", store, cwd=tmp_path) for folder in folders]
    ended = [(sync.wait(timeout=180), *sync.communicate()) for sync in syncs]
    assert [code for code, _, _ in ended] == [0, 0], ended
    (_, said, warned), (_, said_b, warned_b) = ended
    assert "1 records: 1 added" in said and "1 records: 1 added" in said_b, ended
    assert "1 unreadable line(s) skipped" in warned and "1 repeated record(s) counted once" in warned
    assert "1 record(s) reuse an earlier record's record_id with other content" in warned
    assert "unreadable" not in warned_b and "reuse" not in warned_b, warned_b  # box-b's records are all fine
    parents, children = runs_in(store, "hostile")
    assert len(parents) == 2 and len(children) == 2
    # Box-a's child holds its first record, not the conflicting one (box-b's is the same measurement).
    throughput = [value for c in children for key, value in c.data.metrics.items() if key.startswith("throughput_")]
    assert throughput == [pytest.approx(record["throughput"])] * 2  # the MLP's unit is samples/s


# -- exit codes that tell the truth ------------------------------------------------------------------


def test_ui_refuses_a_busy_port_and_exits_with_the_signal_that_stopped_it(finished, tmp_path):
    out = _copy(finished, tmp_path)
    with __import__("socket").socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        result = run_measured("ui", "--out", str(out), "--port", str(busy), cwd=tmp_path)
    assert_refused(result, f"--port {busy}: cannot serve there (in use by another program)")
    assert "MLflow UI on" not in result["stdout"]

    ui, announced = _serving_ui(out, tmp_path)
    assert _listening(int(announced.split(":")[2].split("/")[0]))  # announced once it answers, not before
    server = _group_of(_children(ui.pid))
    assert ui.poll() is None and server, ui.communicate()
    ui.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    ui.send_signal(signal.SIGTERM)  # a second stop keeps the first one's exit code
    _, stderr = ui.communicate(timeout=60)
    assert ui.returncode == 143 and "Traceback" not in stderr, stderr
    assert not [pid for pid in server if process_alive(pid)]  # its workers went with it


def test_ui_exits_2_when_its_server_dies(finished, tmp_path):
    out = _copy(finished, tmp_path)
    ui, _ = _serving_ui(out, tmp_path)
    for pid in _children(ui.pid):
        os.killpg(pid, signal.SIGKILL)  # the server crashes
    stdout, stderr = ui.communicate(timeout=60)
    assert ui.returncode == 2, stdout + stderr
    assert stderr.startswith("amp-suite: error: the MLflow UI stopped (exit -9)") and stderr.count("\n") == 1


def _serving_ui(out: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    """`amp-suite ui` started, and its announcement "MLflow UI on http://...", printed once it serves."""
    import threading

    ui = start_amp_suite("ui", "--out", str(out), "--port", str(free_port()), cwd=cwd)
    lines: list[str] = []

    def read_until_announced() -> None:
        while (line := ui.stdout.readline()) and not line.startswith("MLflow UI on"):
            lines.append(line)  # e.g. that the copied folder's artifacts were repointed
        lines.append(line)

    reader = threading.Thread(target=read_until_announced, daemon=True)
    reader.start()
    reader.join(timeout=120)
    assert lines and lines[-1].startswith("MLflow UI on http://127.0.0.1:"), (lines, ui.poll())
    return ui, lines[-1]


def _listening(port: int) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
        return True
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    done = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(line) for line in done.stdout.split()]


def _group_of(leaders: list[int]) -> list[int]:
    """Every process in the process groups these processes lead (the server and its workers)."""
    done = subprocess.run(["ps", "-e", "-o", "pid=,pgid="], capture_output=True, text=True)
    pairs = [tuple(int(field) for field in line.split()) for line in done.stdout.splitlines() if line.strip()]
    return [pid for pid, group in pairs if group in leaders]


def test_a_report_the_disk_cannot_hold_is_not_announced_and_fails_its_run(tmp_path, small_mount):
    out = tmp_path / "out"
    small_mount(out / "report", "8k")  # records and store have room; the report does not
    done = amp_suite("run", "--matrix", str(_matrix(tmp_path, precisions=["fp32"])), "--out", str(out), *CPU,
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 5, done.stdout + done.stderr
    assert "Report: not written" in done.stdout and "report.html" not in done.stdout
    assert "report: not written (OSError: [Errno 28] No space left on device" in done.stdout
    assert not list((out / "report").rglob("*.partial"))
    parents, children = runs_in(embedded(out), "hostile")
    assert [p.info.status for p in parents] == ["FAILED"] and [c.info.status for c in children] == ["FINISHED"]

    again = amp_suite("report", str(out), cwd=tmp_path)
    assert again.returncode == 5 and again.stderr.count("\n") == 1, again.stdout + again.stderr
    assert "report not written to" in again.stderr and "No space left on device" in again.stderr
    assert "wrote" not in again.stdout and not list((out / "report").rglob("*.partial"))


def _start_slow_run(tmp_path: Path, precisions: list[str]) -> tuple[subprocess.Popen, Path]:
    matrix = _matrix(tmp_path, precisions=precisions, steps=3000, workloads=[SLOW])
    out = tmp_path / "out"
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu",
                          "--tracking-uri", f"sqlite:///{tmp_path / 'store.db'}", cwd=tmp_path,
                          env=ONE_THREAD)  # fmt: skip
    return run, out


def test_a_second_stop_signal_keeps_the_first_ones_exit_code(tmp_path):
    run, out = _start_slow_run(tmp_path, ["fp32"])
    wait_for(lambda: (out / "logs" / "mlp_bs8_seed0_fp32.log").exists(), 120, "the cell to start")
    for _ in range(4):  # a stop, and three more while the first one's cleanup runs
        run.send_signal(signal.SIGTERM)
        time.sleep(0.1)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 143, stdout + stderr
    assert "stopped by SIGTERM" in stderr and "Traceback" not in stderr


def _append_fails_with(tmp_path: Path, damage) -> subprocess.CompletedProcess:
    """Run two slow cells; once the first record is written, `damage(out)` breaks the folder."""
    run, out = _start_slow_run(tmp_path, ["fp32", "bf16"])
    wait_for(lambda: (out / "results.jsonl").is_file() and (out / "results.jsonl").stat().st_size, 180,
             "the first record")  # fmt: skip
    damage(out)
    stdout, stderr = run.communicate(timeout=180)
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)


def test_a_results_file_made_unwritable_says_so_not_make_room(tmp_path):
    probe = tmp_path / "probe"
    probe.touch()
    if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    out = tmp_path / "out"
    try:
        done = _append_fails_with(tmp_path, lambda out: subprocess.run(["chattr", "+i", str(out / "results.jsonl")]))
    finally:
        subprocess.run(["chattr", "-i", str(out / "results.jsonl")], check=False)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "Operation not permitted" in done.stderr and "Make it writable, then run again with --resume" in done.stderr
    assert "Make room" not in done.stderr and len(read_records(out)) == 1


def _replace_with_a_file(out: Path) -> None:
    shutil.rmtree(out)
    out.write_text("")  # nothing can recreate the folder under the run


def test_a_folder_deleted_under_the_run_is_not_called_intact(tmp_path):
    done = _append_fails_with(tmp_path, _replace_with_a_file)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "is gone, and the records this run wrote into it with it" in done.stderr
    assert "intact" not in done.stderr and "Traceback" not in done.stderr


def test_a_worker_killed_mid_cell_is_recorded_under_the_machine_it_ran_on(tmp_path):
    run, out = _start_slow_run(tmp_path, ["fp32", "bf16"])
    log = out / "logs" / "mlp_bs8_seed0_bf16.log"
    # It has probed its device and is training: the cell logs where its timed steps begin.
    wait_for(lambda: log.exists() and "timed steps: begin" in log.read_text(), 180, "the second cell's timed steps")
    worker = wait_for(lambda: _holding(log), 30, "the cell's process")
    os.kill(worker, signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=180)
    assert run.returncode == 3, stdout + stderr
    records = {record["precision"]: record for record in read_records(out)}
    fp32, bf16 = records["fp32"], records["bf16"]
    assert bf16["status"] == "failed" and "worker process died (killed by SIGKILL" in bf16["reason"]
    assert fp32["status"] == "ok"  # side by side, the turns bf16 left went on without it
    # The same machine: every field of its key (the host's cost per kernel is each process's own timing).
    same = [{k: v for k, v in r["machine"].items() if k != "host_us_per_kernel"} for r in (bf16, fp32)]
    assert same[0] == same[1] and bf16["environment"]["torch"] == fp32["environment"]["torch"]
    assert "unknown machine" not in stdout and stdout.count("hostile: 2 cells on ") == 1, stdout


def _holding(path: Path) -> int | None:
    """The process that has `path` open (the cell writing its log)."""
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) == str(path):
                return int(fd.parts[2])
        except OSError:
            continue
    return None


# -- found by a QA pass after the fixes above ---------------------------------------------------------


def _link(entry: Path, target: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink(missing_ok=True)
    entry.symlink_to(target)


@pytest.mark.parametrize("entry", ["mlflow.db", "logs", "mlartifacts"])
def test_a_copy_whose_entries_link_elsewhere_is_refused_by_run_and_sync(finished, tmp_path, entry):
    original = finished / "out"
    before = _snapshot(original)
    copy = _copy(finished, tmp_path)
    _link(copy / entry, original / entry)  # into the original: its store, its logs, its artifacts
    matrix = _matrix(tmp_path, precisions=["fp32", "bf16"])
    result = run_measured("run", "--matrix", str(matrix), "--out", str(copy), "--resume", cwd=tmp_path)
    assert_refused(result, f"{copy / entry} is a symbolic link; the suite writes only inside the folder")
    result = run_measured("sync", str(copy), cwd=tmp_path)
    assert_refused(result, f"{copy / entry} is a symbolic link; the suite writes only inside the folder")
    assert _snapshot(original) == before


def test_sync_refuses_a_store_that_is_a_fifo_and_checks_every_folder_before_syncing_any(finished, tmp_path):
    fine, broken = _copy(finished, tmp_path, "fine"), _copy(finished, tmp_path, "broken")
    (broken / "mlflow.db").unlink()
    os.mkfifo(broken / "mlflow.db")  # SQLite would wait on it forever
    store = tmp_path / "team.db"
    result = run_measured("sync", str(fine), str(broken), "--tracking-uri", f"sqlite:///{store}", cwd=tmp_path)
    assert_refused(result, f"{broken / 'mlflow.db'} is not a file")
    assert not store.exists()  # the good folder was not synced first
    result = run_measured("sync", str(broken), cwd=tmp_path)
    assert_refused(result, f"{broken / 'mlflow.db'} is not a file")


def test_a_report_whose_figures_folder_links_elsewhere_is_refused(finished, tmp_path):
    out = _copy(finished, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "report" / "figures").mkdir(parents=True, exist_ok=True)
    _link(out / "report" / "figures", elsewhere)
    result = run_measured("report", str(out), "--format", "md", cwd=tmp_path)
    assert_refused(result, "figures is a symbolic link; a report stays in its folder")
    assert not list(elsewhere.iterdir())


def test_a_ray_address_with_a_password_is_refused_without_echoing_it(tmp_path):
    matrix = _matrix(tmp_path)
    for address in ("ray://u:p4ss@127.0.0.1:1", "tok3nsecret@127.0.0.1:1"):
        result = run_measured("run", "--matrix", str(matrix), "--ray", address, "--out", str(tmp_path / "o"),
                              cwd=tmp_path)  # fmt: skip
        assert_refused(result, "--ray: a Ray address has no user or password")
        assert "p4ss" not in result["stderr"] + result["stdout"] and "tok3nsecret" not in result["stderr"]


def test_hostile_record_strings_draw_figures_without_a_word_on_stderr(finished, tmp_path):
    out = _copy(finished, tmp_path)
    record = read_records(out)[0]
    hostile = {**record, "record_id": "hostile", "precision": "bf16\x1b[31m\x07\r$x", "throughput": 1.0}
    conflicting = {**record, "throughput": 12345.0}  # the first record's id, other content
    with (out / "results.jsonl").open("a") as results:
        results.write(json.dumps(hostile) + "\n" + json.dumps(conflicting) + "\n")
    done = amp_suite("report", str(out), "--format", "md,html", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == (
        "amp-suite: warning: 1 record(s) reuse an earlier record's record_id with other content: the first was kept,"
        " the later ones left out\n"
    )  # no matplotlib warning quoting the record raw, no control characters
    html = (out / "report" / "report.html").read_text()
    assert "\x1b" not in html and "\x07" not in html
