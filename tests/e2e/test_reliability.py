"""What goes wrong, through the CLI as users run it: divergence, failing cells, verdicts that
decide the exit code, signals, a killed process, two runs on one folder, a full disk and a
damaged results file. Each test starts the real console script on real files.

Every `amp-suite run` costs seconds of start-up, so tests that only read what a run left share
one: the `troubled` run holds a diverging, a failing and an out-of-memory cell and starts on a
damaged results file, each test asserting on its own cells; the `verdicts` matrix is started
twice at once on one folder, for its exit 4 and for the run that is refused. Runs that are
signalled or killed train a cell just long enough to be stopped in the middle of it: the signal
goes once the cell's log says its timed steps have begun."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import EXPERIMENTS, amp_suite, embedded, read_records, runs_in, start_amp_suite, tiny_matrix, wait_for

pytestmark = pytest.mark.slow

MLP = tiny_matrix()["workloads"][0]  # bf16 runs on any CPU (forced where it has no native bf16)


def _matrix(folder: Path, **overrides) -> Path:
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(**overrides)))
    return path


def _run(folder: Path, matrix: Path, *extra: str, out: str = "out", env: dict[str, str] | None = None):
    return amp_suite("run", "--matrix", str(matrix), "--out", str(folder / out), *extra, cwd=folder, env=env)


# These tests are about what goes wrong, not which device runs: `--device cpu` spares each run's
# own process the seconds of importing torch that asking for CUDA costs (the cells load it anyway).
CPU = ("--device", "cpu")


def _statuses(out: Path, experiment: str) -> dict[str, str]:
    """Each run's status, by its cell's id (children) or its name (parents)."""
    parents, children = runs_in(embedded(out), experiment)
    return {run.data.tags.get("cell_id", run.info.run_name): run.info.status for run in parents + children}


def read_records_lenient(out: Path) -> list[dict]:
    records = []
    for line in (out / "results.jsonl").read_bytes().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _exit_3_lines(stdout: str) -> str:
    """What the run printed under "Exit 3 (cells failed):", the cells it names as the reason."""
    _, found, problems = stdout.partition("Exit 3 (cells failed):")
    assert found, stdout
    return problems


# -- outcomes and exit codes: one run where things go wrong -------------------------------------

# Loaded by every Python process of the run through PYTHONPATH: once a process imports the training
# loop (the forkserver the cells are forked from), makes the training step of one precision raise
# the exception CUDA raises when a batch does not fit, as a GPU would, on a machine that has none.
# The patch waits for that import so that the CLI's own process is not made to load torch for it.
SIMULATED_OOM = """
import importlib.abc
import importlib.machinery
import sys


def simulate_oom(loop):
    import torch

    real_step = loop.Trainer.step

    def step(self, inputs, targets):
        if self.policy.name == "fp32" and inputs.shape[0] == 16:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated by the test)")
        return real_step(self, inputs, targets)

    loop.Trainer.step = step


class PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "amp_suite.cell.loop":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            simulate_oom(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, PatchOnImport())
"""

DAMAGED = b"\xff\xfe\x00 not a record\n"  # not UTF-8, not JSON, not a record


@dataclass
class Troubled:
    done: subprocess.CompletedProcess
    matrix: Path
    out: Path

    def records(self) -> dict[tuple[str, str], dict]:
        """(workload, precision): the record (the damaged first line skipped)."""
        return {(r["workload"], r["precision"]): r for r in read_records_lenient(self.out)}

    def order(self) -> list[tuple[str, str]]:
        return [(r["workload"], r["precision"]) for r in read_records_lenient(self.out)]


@pytest.fixture(scope="module")
def troubled(tmp_path_factory) -> Troubled:
    """One run of a matrix whose cells, in this order: diverge (wild), fail (resnet, its data
    folder missing), run out of memory (big, fp32) and then end ok (big bf16, mlp). Its folder
    starts with a damaged results.jsonl line. Each test below checks its own cells, their runs
    in the store and their lines of the output, and that the cells after them still ran."""
    folder = tmp_path_factory.mktemp("troubled")
    (folder / "hooks").mkdir()
    (folder / "hooks" / "sitecustomize.py").write_text(SIMULATED_OOM)
    wild = {**MLP, "label": "wild", "lr": 1.0e6}  # the weights blow up within a few steps
    broken = {"workload": "resnet", "arch": "resnet18", "image_size": 32, "num_classes": 2, "batch_sizes": [4],
              "samples": 8, "data": {"source": "imagefolder", "path": str(folder / "no-such-folder")}}  # fmt: skip
    big = {**MLP, "label": "big", "batch_sizes": [16]}  # fp32 at batch 16 "does not fit"
    matrix = _matrix(folder, name="troubled", precisions=["fp32", "bf16"], workloads=[wild, broken, big, MLP])
    out = folder / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(DAMAGED)
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), *CPU, cwd=folder,
                     env={"PYTHONPATH": str(folder / "hooks")})  # fmt: skip
    return Troubled(done, matrix, out)


def _ran_after(troubled: Troubled, workload: str) -> list[tuple[str, str]]:
    """(workload, status) of the cells recorded after the workload's comparison: the matrix went on
    past it. Within a comparison, side by side, the cells end in any order."""
    records = read_records_lenient(troubled.out)
    last = max(i for i, r in enumerate(records) if r["workload"] == workload)
    return sorted((r["workload"], r["status"]) for r in records[last + 1 :])


def test_a_diverging_cell_is_recorded_mirrored_and_summarised_and_the_matrix_goes_on(troubled):
    done = troubled.done
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    records = troubled.records()
    assert set(troubled.order()[:2]) == {("wild", "fp32"), ("wild", "bf16")}
    assert records["wild", "fp32"]["status"] == "diverged" and records["wild", "bf16"]["status"] == "diverged"
    after = _ran_after(troubled, "wild")
    assert len(after) == 6 and after.count(("mlp", "ok")) == 2  # the matrix went on: every cell ran
    wild_fp32 = records["wild", "fp32"]
    assert wild_fp32["nonfinite_step"] is not None and "step" in wild_fp32["reason"]
    assert any(value in ("NaN", "Infinity", "-Infinity") for value in wild_fp32["loss_curve"])
    statuses = _statuses(troubled.out, "troubled")
    assert statuses["wild/bs8/seed0/fp32"] == "FAILED" and statuses["mlp/bs8/seed0/fp32"] == "FINISHED"
    assert "wild/bs8/seed0/bf16: diverged" in _exit_3_lines(done.stdout)  # named under "Exit 3"
    assert "diverged" in done.stdout.split("Results:")[0]  # and in the summary table


def test_a_cell_that_fails_exits_3_and_the_next_cell_still_runs(troubled):
    done = troubled.done
    assert done.returncode == 3, done.stdout + done.stderr
    assert troubled.records()["resnet", "fp32"]["status"] == "failed"
    after = _ran_after(troubled, "resnet")
    assert len(after) == 4 and after.count(("mlp", "ok")) == 2  # every later cell ran
    assert "resnet/bs4/seed0/fp32: failed" in _exit_3_lines(done.stdout)


def test_out_of_memory_is_recorded_as_oom_and_the_next_cell_runs(troubled):
    done = troubled.done
    assert done.returncode == 3, done.stdout + done.stderr  # not expected by the matrix: named under "Exit 3"
    records = troubled.records()
    order = troubled.order()  # side by side, a comparison's cells end in any order; comparisons in turn
    big, mlp = [("big", "fp32"), ("big", "bf16")], [("mlp", "fp32"), ("mlp", "bf16")]
    assert set(order[-4:-2]) == set(big) and set(order[-2:]) == set(mlp)
    assert [records[cell]["status"] for cell in big + mlp] == ["oom", "ok", "ok", "ok"]
    oom = records["big", "fp32"]
    assert oom["reason"].startswith("out of memory at batch 16: OutOfMemoryError: CUDA out of memory.")
    # It ran out in its warmup, before bf16 started beside it (cells start one at a time): nothing
    # else held the device, so the oom is its own, not run again (tests/unit/execution/test_side_by_side.py).
    assert oom["ran_alone"] is None
    assert oom["device_memory_mb"] is None  # a CPU has no device memory to report
    assert _statuses(troubled.out, "troubled")["big/bs16/seed0/fp32"] == "FAILED"
    assert "big/bs16/seed0/fp32: oom: out of memory at batch 16" in _exit_3_lines(done.stdout)
    assert "Traceback" not in done.stderr


def test_an_unreadable_results_line_is_skipped_with_a_warning(troubled, tmp_path):
    """The troubled run started on a damaged first line: it warned, and ran and recorded every
    cell as usual. --resume (in a copy of the folder, on its cells that ended ok) warns again and
    reuses their records."""
    assert "1 unreadable line(s)" in troubled.done.stdout
    assert troubled.done.returncode == 3, troubled.done.stdout + troubled.done.stderr  # its cells' verdict
    assert len(troubled.order()) == 8  # every cell ran, the line skipped rather than fatal
    copy = tmp_path / "copy"
    shutil.copytree(troubled.out, copy)
    done = amp_suite("run", "--matrix", str(troubled.matrix), "--out", str(copy), "--resume", "--workloads", "mlp",
                     *CPU, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 unreadable line(s)" in done.stdout
    before = [r["record_id"] for r in read_records_lenient(troubled.out)]
    assert [r["record_id"] for r in read_records_lenient(copy)] == before  # --resume reused them


# -- verdicts, and two runs on one folder: one matrix started twice at once ---------------------


@dataclass
class Raced:
    ended: list[tuple[int, str, str]]  # (exit code, stdout, stderr) of each of the two runs
    out: Path

    def judged(self) -> tuple[int, str, str]:
        """The run that took the folder and ran the matrix (the other one exits 2)."""
        ran = [ended for ended in self.ended if ended[0] != 2]
        assert ran, self.ended
        return ran[0]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> Raced:
    """A matrix whose parity verdicts are not the ones it expects, started twice at once on one
    folder that does not exist yet (both would create it and the MLflow schema): one run takes
    the folder and judges the matrix, the other is refused."""
    folder = tmp_path_factory.mktemp("verdicts")
    shipped = yaml.safe_load((EXPERIMENTS / "failure-modes.yaml").read_text())
    # 20 steps are enough for the verdicts, with margins of ten times the tolerance or more: fp16-noscale
    # stays near chance (accuracy ~0.07) while fp32 and fp16 learn (~0.72, within ~0.003 of each other).
    shipped.update(name="verdicts", repeats=2, steps=20, expect=[{"precision": "fp16", "parity": "fail"}])
    matrix = folder / "verdicts.yaml"
    matrix.write_text(yaml.safe_dump(shipped))
    out = folder / "fresh"
    args = ("run", "--matrix", str(matrix), "--out", str(out), *CPU)
    first, second = start_amp_suite(*args, cwd=folder), start_amp_suite(*args, cwd=folder)
    ended = []
    for run in (first, second):
        stdout, stderr = run.communicate(timeout=300)
        ended.append((run.returncode, stdout, stderr))
    return Raced(ended, out)


def test_parity_verdicts_against_expectations_decide_exit_4(verdicts):
    """An unexpected parity failure, and an expected failure that does not happen, both exit 4."""
    code, stdout, stderr = verdicts.judged()
    assert code == 4, stdout + stderr
    problems = stdout.split("Exit 4 (unexpected verdicts):")[1]
    assert "mlp/bs64/fp16: parity pass (expected fail)" in problems
    assert "mlp/bs64/fp16-noscale: parity fail" in problems
    tags = runs_in(embedded(verdicts.out), "verdicts")[0][0].data.tags
    assert tags["outcome"] == "unexpected verdicts" and tags["exit_code"] == "4"


def test_two_runs_on_one_folder_one_runs_and_the_other_is_told_why(verdicts):
    codes = sorted(code for code, _, _ in verdicts.ended)
    assert codes == [2, 4], verdicts.ended  # one refused; the other ran the matrix to its verdict (above)
    _, _, refused = next(ended for ended in verdicts.ended if ended[0] == 2)
    assert refused.count("\n") == 1 and "is in use by another amp-suite (amp-suite run, pid" in refused
    assert len(read_records(verdicts.out)) == 2 * 4 and "Traceback" not in refused  # each cell once (2 seeds x 4 modes)
    assert len(runs_in(embedded(verdicts.out), "verdicts")[0]) == 1  # and one run in the store


# -- signals and killed processes --------------------------------------------------------------

SLOW = {**MLP, "samples": 256}
SLOW_STEPS = 3000
# On one thread a bf16 step of this cell takes ~1 ms (fp32 ~0.75 ms), more on a busy machine: 3 s or
# more of timed steps for a signal to land in, and a re-run (--resume) of 3-4 s. With torch's default
# of a thread per core the same steps take 10-40 ms where the cores are shared (OpenMP spin-waits),
# so these runs get one thread whoever runs the tests, as `make test-slow`'s workers give every run
# (conftest.SHARED_CORES).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _training(log: Path) -> bool:
    """The cell's timed steps have begun: the line amp_suite.instruments.timers.HostCpuTime writes to its log."""
    return log.exists() and "timed steps: begin" in log.read_text(errors="replace")


def _start_slow_run(tmp_path: Path, name: str):
    matrix = _matrix(tmp_path, name=name, steps=SLOW_STEPS, precisions=["fp32", "bf16"], workloads=[SLOW])
    out = tmp_path / "out"
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), *CPU, cwd=tmp_path, env=ONE_THREAD)
    # Side by side, fp32 ran its first window and bf16 has taken its turn: a signal now lands while
    # both cells are in their timed steps, one of them waiting for the other.
    wait_for(lambda: _training(out / "logs" / "mlp_bs8_seed0_bf16.log"), 120, "the second cell's turn")
    return matrix, out, run


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_like_ctrl_c_and_leave_nothing_running(tmp_path, sent):
    matrix, out, run = _start_slow_run(tmp_path, "signalled")
    run.send_signal(sent)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 128 + sent, stderr
    assert stderr.count("\n") == 1 and f"stopped by {sent.name}" in stderr and "--resume" in stderr
    # Neither cell ended: each is recorded interrupted (never ok: nothing half-measured is taken for a
    # result), and the stop message names the file that holds them.
    stopped = read_records(out)
    assert sorted(r["precision"] for r in stopped) == ["bf16", "fp32"]
    assert {r["status"] for r in stopped} == {"interrupted"}
    assert all(r["reason"].startswith(f"interrupted by {sent.name}") for r in stopped)
    assert str(out / "results.jsonl") in stderr
    statuses = _statuses(out, "signalled")
    assert "RUNNING" not in statuses.values()
    assert statuses["mlp/bs8/seed0/fp32"] == statuses["mlp/bs8/seed0/bf16"] == "KILLED"
    parent = runs_in(embedded(out), "signalled")[0][0]
    assert parent.info.status == "KILLED" and parent.data.tags["amp_suite.ended_by"].endswith(sent.name)
    # What the UI opens on says there is no answer, why, and what to run next.
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith(f"No answer: amp-suite was stopped by {sent.name}, after 0 cell(s)") and "--resume" in note
    ended = [json.loads(line) for line in (out / "invocations.jsonl").read_text().splitlines()][-1]
    assert ended["outcome"] == "interrupted"
    if sent == signal.SIGTERM:  # and it resumes where it stopped
        again = _run(tmp_path, matrix, "--resume", *CPU, env=ONE_THREAD)
        assert again.returncode == 0, again.stdout + again.stderr
        assert sorted(r["precision"] for r in read_records(out) if r["status"] == "ok") == ["bf16", "fp32"]


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


@dataclass
class Killed:
    matrix: Path
    out: Path
    copy: Path  # of `out`, taken once the killed run and its processes were gone
    workers: set[int]  # the run's processes below it when it was killed (forkserver, cell)
    survivors: set[int]  # those still running 30 s after the kill


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Killed:
    """A run killed (SIGKILL) in the middle of its first cell, before any record. The next run
    takes its folder over (the killed-run test); `amp-suite sync` gets a copy (the sync test)."""
    folder = tmp_path_factory.mktemp("killed")
    # bf16 first, the cell that is killed; fp32 after it, a short cell for the next run.
    matrix = _matrix(folder, name="killed", steps=SLOW_STEPS, precisions=["bf16", "fp32"], workloads=[SLOW])
    out = folder / "out"
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), *CPU, cwd=folder, env=ONE_THREAD)
    wait_for(lambda: _training(out / "logs" / "mlp_bs8_seed0_bf16.log"), 120, "the first cell to train")
    workers = _descendants(run.pid)
    run.kill()
    run.wait(timeout=30)
    try:
        wait_for(lambda: not any(_alive(pid) for pid in workers), 30, "the cell process to stop with its parent")
    except AssertionError:
        pass  # the killed-run test says which are left
    survivors = {pid for pid in workers if _alive(pid)}
    shutil.copytree(out, folder / "copy")
    return Killed(matrix, out, folder / "copy", workers, survivors)


def test_a_killed_run_stops_its_cell_and_the_next_run_closes_what_it_left_open(killed, tmp_path):
    assert killed.workers, "the run has a forkserver and a cell process"
    assert not killed.survivors, "the cell process stops with its parent"
    out = killed.out
    assert "RUNNING" in _statuses(out, "killed").values()  # what SIGKILL leaves behind

    # The next run takes the folder and closes what the killed one left open, before any cell (it
    # runs only the fp32 cell, the shorter one).
    again = amp_suite("run", "--matrix", str(killed.matrix), "--out", str(out), "--resume", "--precisions", "fp32",
                      *CPU, cwd=tmp_path, env=ONE_THREAD)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 earlier run(s)" in again.stdout and "killed before they ended" in again.stdout
    assert "tracking: could not" not in again.stdout
    parents, children = runs_in(embedded(out), "killed")
    assert "RUNNING" not in {r.info.status for r in parents + children}
    killed_runs = [r for r in parents + children if r.info.status == "KILLED"]
    assert len(killed_runs) == 3  # the first invocation's parent run and the two cells it ran side by side
    assert all("was killed before the run ended" in r.data.tags["amp_suite.ended_by"] for r in killed_runs)
    outcomes = [json.loads(line).get("outcome") for line in (out / "invocations.jsonl").read_text().splitlines()]
    assert outcomes.count("killed") == 1 and outcomes[-1] == "finished"


# -- damaged files and full disks -------------------------------------------------------------


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
    matrix = _matrix(tmp_path, name="full", precisions=["fp32"], repeats=2)  # two cells; the disk holds one record
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # the store lives elsewhere: only the records fill the disk
    out = small_disk / "out"
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--tracking-uri", store, *CPU, cwd=tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "No space left on device" in done.stderr and "--resume" in done.stderr
    text = (out / "results.jsonl").read_bytes()
    kept = [json.loads(line) for line in text.splitlines()]  # every line whole
    assert 0 < len(kept) < 2 and text.endswith(b"\n")
    assert "RUNNING" not in {r.info.status for group in runs_in(store, "full") for r in group}

    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)  # room again
    again = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--tracking-uri", store, "--resume", *CPU,
                      cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert len({r["cell_id"] for r in read_records(out) if r["status"] == "ok"}) == 2


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


def test_sync_closes_what_a_run_killed_before_its_first_record_left_open(killed, tmp_path):
    out = killed.copy  # as the killed run left it
    assert not (out / "results.jsonl").exists() and "RUNNING" in _statuses(out, "killed").values()
    done = amp_suite("sync", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # The parent and the two cells it ran side by side, wherever the line wraps.
    assert "3 run(s) left open closed as KILLED" in " ".join(done.stdout.split())
    assert set(_statuses(out, "killed").values()) == {"KILLED"}
