"""What goes wrong, through the CLI as users run it: divergence, failing cells, verdicts that
decide the exit code, signals, a killed process, two runs on one folder, a full disk and a
damaged results file. Each test starts the real console script on real files."""

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
from conftest import EXPERIMENTS, amp_suite, embedded, read_records, runs_in, start_amp_suite, tiny_matrix, wait_for

pytestmark = pytest.mark.slow

MLP = tiny_matrix()["workloads"][0]  # bf16 runs on any CPU (forced where it has no native bf16)


def _matrix(tmp_path: Path, **overrides) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(**overrides)))
    return path


def _run(tmp_path: Path, matrix: Path, *extra: str, out: str = "out"):
    return amp_suite("run", "--matrix", str(matrix), "--out", str(tmp_path / out), *extra, cwd=tmp_path)


def _statuses(out: Path, experiment: str) -> dict[str, str]:
    parents, children = runs_in(embedded(out), experiment)
    return {run.info.run_name: run.info.status for run in parents + children}


# -- outcomes and exit codes -------------------------------------------------------------------


def test_a_diverging_cell_is_recorded_mirrored_and_summarised_and_the_matrix_goes_on(tmp_path):
    wild = {**MLP, "label": "wild", "lr": 1.0e6}  # the weights blow up within a few steps
    matrix = _matrix(tmp_path, name="diverge", precisions=["fp32", "bf16"], workloads=[wild, MLP])
    done = _run(tmp_path, matrix)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    records = read_records(tmp_path / "out")
    assert [(r["workload"], r["status"]) for r in records] == [
        ("wild", "diverged"), ("wild", "diverged"), ("mlp", "ok"), ("mlp", "ok"),
    ]  # fmt: skip
    wild_fp32 = records[0]
    assert wild_fp32["nonfinite_step"] is not None and "step" in wild_fp32["reason"]
    assert any(value in ("NaN", "Infinity", "-Infinity") for value in wild_fp32["loss_curve"])
    statuses = _statuses(tmp_path / "out", "diverge")
    assert statuses["wild/bs8/seed0/fp32"] == "FAILED" and statuses["mlp/bs8/seed0/fp32"] == "FINISHED"
    assert "wild/bs8/seed0/bf16: diverged" in done.stdout  # named under "Exit 3"
    assert "diverged" in done.stdout.split("Results:")[0]  # and in the summary table


def test_a_cell_that_fails_exits_3_and_the_next_cell_still_runs(tmp_path):
    broken = {"workload": "resnet", "arch": "resnet18", "image_size": 32, "num_classes": 2, "batch_sizes": [4],
              "samples": 8, "data": {"source": "imagefolder", "path": str(tmp_path / "no-such-folder")}}  # fmt: skip
    matrix = _matrix(tmp_path, name="broken", precisions=["fp32"], workloads=[broken, MLP])
    done = _run(tmp_path, matrix)
    assert done.returncode == 3, done.stdout + done.stderr
    assert [r["status"] for r in read_records(tmp_path / "out")] == ["failed", "ok"]
    assert "resnet/bs4/seed0/fp32: failed" in done.stdout


# Loaded by every Python process of the run (CLI, forkserver, cells) through PYTHONPATH: makes the
# training step of one precision raise the exception CUDA raises when a batch does not fit, as a
# GPU would, on a machine that has none.
SIMULATED_OOM = """
import torch
import amp_suite.cell.loop

real_step = amp_suite.cell.loop.Trainer.step


def step(self, inputs, targets):
    if self.policy.name == "fp32" and inputs.shape[0] == 16:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated by the test)")
    return real_step(self, inputs, targets)


amp_suite.cell.loop.Trainer.step = step
"""


def test_out_of_memory_is_recorded_as_oom_and_the_next_cell_runs(tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(SIMULATED_OOM)
    big = {**MLP, "label": "big", "batch_sizes": [16]}  # fp32 at batch 16 "does not fit"
    matrix = _matrix(tmp_path, name="oom", precisions=["fp32", "bf16"], workloads=[big, MLP])
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(tmp_path / "out"), cwd=tmp_path,
                     env={"PYTHONPATH": str(tmp_path / "hooks")})  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr  # not expected by the matrix: named under "Exit 3"
    records = read_records(tmp_path / "out")
    assert [(r["workload"], r["precision"], r["status"]) for r in records] == [
        ("big", "fp32", "oom"), ("big", "bf16", "ok"), ("mlp", "fp32", "ok"), ("mlp", "bf16", "ok"),
    ]  # fmt: skip
    assert records[0]["reason"].startswith("out of memory at batch 16: OutOfMemoryError: CUDA out of memory.")
    assert records[0]["device_memory_mb"] is None  # a CPU has no device memory to report
    assert _statuses(tmp_path / "out", "oom")["big/bs16/seed0/fp32"] == "FAILED"
    assert "big/bs16/seed0/fp32: oom: out of memory at batch 16" in done.stdout
    assert "Traceback" not in done.stderr


def test_parity_verdicts_against_expectations_decide_exit_4(tmp_path):
    """An unexpected parity failure, and an expected failure that does not happen, both exit 4."""
    shipped = yaml.safe_load((EXPERIMENTS / "failure-modes.yaml").read_text())
    shipped.update(name="verdicts", repeats=2, steps=60, expect=[{"precision": "fp16", "parity": "fail"}])
    matrix = tmp_path / "verdicts.yaml"
    matrix.write_text(yaml.safe_dump(shipped))
    done = _run(tmp_path, matrix)
    assert done.returncode == 4, done.stdout + done.stderr
    problems = done.stdout.split("Exit 4 (unexpected verdicts):")[1]
    assert "mlp/bs64/fp16: parity pass (expected fail)" in problems
    assert "mlp/bs64/fp16-noscale: parity fail" in problems
    tags = runs_in(embedded(tmp_path / "out"), "verdicts")[0][0].data.tags
    assert tags["outcome"] == "unexpected verdicts" and tags["exit_code"] == "4"


# -- signals and killed processes --------------------------------------------------------------

SLOW = {**MLP, "samples": 256}  # with 3,000 steps a cell takes seconds: long enough to signal


def _start_slow_run(tmp_path: Path, name: str):
    matrix = _matrix(tmp_path, name=name, steps=3000, precisions=["fp32", "bf16"], workloads=[SLOW])
    out = tmp_path / "out"
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    # One cell finished and the next one training: a signal now lands mid-cell.
    wait_for(lambda: (out / "results.jsonl").exists() and (out / "logs" / "mlp_bs8_seed0_bf16.log").exists(),
             120, "the second cell to start")  # fmt: skip
    return matrix, out, run


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_like_ctrl_c_and_leave_nothing_running(tmp_path, sent):
    matrix, out, run = _start_slow_run(tmp_path, "signalled")
    run.send_signal(sent)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 128 + sent, stderr
    assert stderr.count("\n") == 1 and f"stopped by {sent.name}" in stderr and "--resume" in stderr
    assert [r["status"] for r in read_records(out)] == ["ok"]
    statuses = _statuses(out, "signalled")
    assert "RUNNING" not in statuses.values() and statuses["mlp/bs8/seed0/bf16"] == "KILLED"
    parent = runs_in(embedded(out), "signalled")[0][0]
    assert parent.info.status == "KILLED" and parent.data.tags["amp_suite.ended_by"].endswith(sent.name)
    ended = [json.loads(line) for line in (out / "invocations.jsonl").read_text().splitlines()][-1]
    assert ended["outcome"] == "interrupted"
    if sent == signal.SIGTERM:  # and it resumes where it stopped
        again = _run(tmp_path, matrix, "--resume")
        assert again.returncode == 0, again.stdout + again.stderr
        assert [r["precision"] for r in read_records(out)] == ["fp32", "bf16"]


def _descendants(pid: int) -> set[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_run_stops_its_cell_and_the_next_run_closes_what_it_left_open(tmp_path):
    matrix, out, run = _start_slow_run(tmp_path, "killed")
    workers = _descendants(run.pid)
    assert workers, "the run has a forkserver and a cell process"
    run.kill()
    run.wait(timeout=30)
    wait_for(lambda: not any(_alive(pid) for pid in workers), 30, "the cell process to stop with its parent")
    assert "RUNNING" in _statuses(out, "killed").values()  # what SIGKILL leaves behind

    # The next run takes the folder and closes what the killed one left open, before any cell (its
    # one cell here is the finished fp32, so it resumes past it: the killed bf16 would take seconds).
    again = _run(tmp_path, matrix, "--resume", "--precisions", "fp32", "--device", "cpu")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 earlier run(s)" in again.stdout and "killed before they ended" in again.stdout
    assert "tracking: could not" not in again.stdout
    parents, children = runs_in(embedded(out), "killed")
    assert "RUNNING" not in {r.info.status for r in parents + children}
    killed = [r for r in parents + children if r.info.status == "KILLED"]
    assert len(killed) == 2  # the first invocation's parent run and the cell it was running
    assert all("was killed before the run ended" in r.data.tags["amp_suite.ended_by"] for r in killed)
    outcomes = [json.loads(line).get("outcome") for line in (out / "invocations.jsonl").read_text().splitlines()]
    assert outcomes.count("killed") == 1 and outcomes[-1] == "finished"


def test_two_runs_on_one_folder_one_runs_and_the_other_is_told_why(tmp_path):
    matrix = _matrix(tmp_path, name="race", steps=3000, precisions=["fp32"], workloads=[SLOW])
    out = tmp_path / "fresh"  # does not exist yet: both would create the MLflow schema
    args = ("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu")
    first, second = start_amp_suite(*args, cwd=tmp_path), start_amp_suite(*args, cwd=tmp_path)
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in (first, second)]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    _, _, refused = next(r for r in results if r[0] == 2)
    assert refused.count("\n") == 1 and "is in use by another amp-suite (amp-suite run, pid" in refused
    assert len(read_records(out)) == 1 and "Traceback" not in refused


# -- damaged files and full disks -------------------------------------------------------------


def test_an_unreadable_results_line_is_skipped_with_a_warning(tmp_path):
    matrix = _matrix(tmp_path, name="damaged", precisions=["fp32"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(b"\xff\xfe\x00 not a record\n")
    for extra in ((), ("--resume",)):
        done = _run(tmp_path, matrix, *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 unreadable line(s)" in done.stdout
    assert [r["status"] for r in read_records_lenient(out)] == ["ok"]  # --resume reused it


def read_records_lenient(out: Path) -> list[dict]:
    records = []
    for line in (out / "results.jsonl").read_bytes().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


@pytest.fixture
def small_disk(tmp_path):
    """A 24 KiB tmpfs: a real file system that fills up. Mounting needs root (CI has it)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_run_with_every_record_so_far_intact(tmp_path, small_disk):
    matrix = _matrix(tmp_path, name="full", precisions=["fp32", "bf16"], repeats=3)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # the store lives elsewhere: only the records fill the disk
    out = small_disk / "out"
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--tracking-uri", store, cwd=tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "No space left on device" in done.stderr and "--resume" in done.stderr
    text = (out / "results.jsonl").read_bytes()
    kept = [json.loads(line) for line in text.splitlines()]  # every line whole
    assert 0 < len(kept) < 6 and text.endswith(b"\n")
    assert "RUNNING" not in {r.info.status for group in runs_in(store, "full") for r in group}

    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)  # room again
    again = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--tracking-uri", store, "--resume",
                      cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert len({r["cell_id"] for r in read_records(out) if r["status"] == "ok"}) == 6


def test_a_results_file_on_a_read_only_folder_is_refused_before_anything_runs(tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a read-only file system")
    mount = tmp_path / "ro"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        started = time.monotonic()
        done = _run(tmp_path, _matrix(tmp_path), out=str(mount / "out"))
        assert done.returncode == 2 and time.monotonic() - started < 15
        assert done.stderr.count("\n") == 1 and "is not writable" in done.stderr
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_sync_closes_what_a_run_killed_before_its_first_record_left_open(tmp_path):
    matrix = _matrix(tmp_path, name="early", steps=3000, precisions=["fp32"], workloads=[SLOW])
    out = tmp_path / "out"
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    wait_for(lambda: (out / "logs" / "mlp_bs8_seed0_fp32.log").exists(), 120, "the first cell to start")
    run.kill()
    run.wait(timeout=30)
    assert not (out / "results.jsonl").exists() and "RUNNING" in _statuses(out, "early").values()
    done = amp_suite("sync", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 run(s) left open closed as KILLED" in done.stdout
    assert set(_statuses(out, "early").values()) == {"KILLED"}
