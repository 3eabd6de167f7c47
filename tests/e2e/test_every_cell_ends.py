"""A user's model is untrusted code: every cell ends, and what it measured is kept.

Through the CLI as users run it, on real files, with real signals. The user's entry (HOSTILE,
beside the matrix) misbehaves only inside a cell: the entry check builds it too, in a process of
its own, and must pass. Its model deadlocks mid-run in bf16, or its build() leaves a non-daemon
thread, a forked grandchild and a daemonised great-grandchild behind (their pids in a file, so
that the test can find them wherever they were re-parented). A stall watchdog in the run stops a
cell that makes no progress (AMP_SUITE_STALL_S, a few seconds here); a stop ends every process
of the run, and the cells' finished windows are recorded, marked interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, cli_env, process_alive, read_records, start_amp_suite, tiny_matrix, wait_for

pytestmark = pytest.mark.slow

HOSTILE = '''
"""Entries that behave in the entry check (no multiprocessing parent) and misbehave in a cell."""
import multiprocessing
import os
import threading
import time

import torch
from torch import nn

from amp_suite import UserWorkload


def _in_a_cell():
    return multiprocessing.parent_process() is not None


class StallsInBf16(nn.Module):
    """Deadlocks on its `after`-th forward under bf16 autocast: mid-run, in bf16 only."""

    def __init__(self, after):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.after, self.calls = after, 0

    def forward(self, x):
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
            self.calls += 1
            if self.calls >= self.after:
                never = threading.Lock()
                never.acquire()
                never.acquire()  # a deadlock: the lock is its own
        return self.layers(x)


def _data(samples):
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(samples, 16, generator=generator)
    return inputs, (inputs[:, :4].argmax(dim=1))


def stalls_in_bf16(after: int = 30) -> UserWorkload:
    return UserWorkload(StallsInBf16(after), train=_data(256), validation=_data(64))


def _daemon(pids):
    """A double fork and setsid: a grandchild of the cell that leaves its process group and parent."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pids, "a") as file:
                file.write(f"daemon {os.getpid()}\\n")
            time.sleep(3600)
        os._exit(0)


class MarksFp32(nn.Module):
    """Writes `mark` on its `after`-th forward outside autocast: fp32 has trained that far."""

    def __init__(self, mark, after):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.mark, self.after, self.calls = mark, after, 0

    def forward(self, x):
        if not torch.is_autocast_enabled("cpu"):
            self.calls += 1
            if self.calls == self.after:
                open(self.mark, "w").close()
        return self.layers(x)


def holds_on(pids: str = "pids.txt", mark_after: int = 0) -> UserWorkload:
    """A cell's build() starts a non-daemon thread and forks (the children hold every pipe the cell has)."""
    if _in_a_cell():
        threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
        child = os.fork()
        if child == 0:
            time.sleep(3600)
            os._exit(0)
        with open(pids, "a") as file:
            file.write(f"cell {os.getpid()}\\ngrandchild {child}\\n")
        _daemon(pids)
    return UserWorkload(MarksFp32(pids + ".fp32", mark_after), train=_data(256), validation=_data(64))


def hangs_in_build() -> UserWorkload:
    if _in_a_cell():
        threading.Event().wait()
    return UserWorkload(nn.Linear(16, 4), train=_data(64), validation=_data(64))
'''

STALL_S = 3  # the watchdog's stated time in these tests (the default is 60 s)
LIMITS = {"AMP_SUITE_STALL_S": str(STALL_S), "AMP_SUITE_PHASE_LIMIT_S": "60", "OMP_NUM_THREADS": "1"}


def _folder(tmp_path: Path, entry: str, args: dict | None = None, **overrides) -> Path:
    (tmp_path / "hostile.py").write_text(HOSTILE)
    workload = {"workload": "custom", "entry": f"hostile.py:{entry}", "args": args or {}, "batch_sizes": [8],
                "force": ["bf16"]}  # fmt: skip
    matrix = tiny_matrix(name=entry.replace("_", "-"), precisions=["fp32", "bf16"], workloads=[workload], **overrides)
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    return tmp_path / "matrix.yaml"


def _by_precision(out: Path) -> dict[str, dict]:
    return {record["precision"]: record for record in read_records(out)}


# -- (a) a stall: a bf16 forward that deadlocks mid-run -----------------------------------------


def test_a_bf16_forward_that_deadlocks_mid_run_is_stopped_and_recorded_failed_with_its_phase(tmp_path):
    matrix = _folder(tmp_path, "stalls_in_bf16", {"after": 30}, steps=60)
    started = time.monotonic()
    done = amp_suite("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=tmp_path, env=LIMITS,
                     timeout=180)  # fmt: skip
    wall_s = time.monotonic() - started
    print(f"stall test: the run ended in {wall_s:.1f} s (stall limit {STALL_S} s)")
    assert done.returncode == 3, done.stdout + done.stderr
    records = _by_precision(tmp_path / "out")
    assert records["fp32"]["status"] == "ok"  # its partner finished its windows, and was recorded
    assert len(records["fp32"]["throughput_windows"]) >= 2
    bf16 = records["bf16"]
    assert bf16["status"] == "failed"
    assert bf16["reason"].startswith("stalled in measure"), bf16["reason"]
    assert f"limit {STALL_S} s" in bf16["reason"] or f"limit {STALL_S:.0f} s" in bf16["reason"], bf16["reason"]
    assert "hostile/bs8/seed0/bf16: failed: stalled in measure" in done.stdout
    assert wall_s < 60, f"the stall was not caught within its limit: {wall_s:.0f} s"


def test_a_build_that_never_returns_is_stopped_after_the_phase_limit(tmp_path):
    matrix = _folder(tmp_path, "hangs_in_build")
    env = {**LIMITS, "AMP_SUITE_PHASE_LIMIT_S": "4"}
    done = amp_suite("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", "--precisions", "fp32",
                     cwd=tmp_path, env=env, timeout=180)  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    (record,) = read_records(tmp_path / "out")
    assert record["status"] == "failed" and record["reason"].startswith("stalled in prepare"), record["reason"]


def _cell_of(pids: Path, log_name: str) -> int:
    """The pid of the cell whose output goes to its log `log_name` (its children's goes there too)."""
    for pid in _pids_written(pids, ("cell",)):
        try:
            if os.readlink(f"/proc/{pid}/fd/1").endswith(log_name):
                return pid
        except OSError:
            continue
    return 0


def test_a_sigstopped_cell_is_a_stall(tmp_path):
    matrix = _folder(tmp_path, "holds_on", {"pids": str(tmp_path / "pids.txt")}, steps=3000)
    out = tmp_path / "out"
    started = time.monotonic()
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=tmp_path,
                          env=LIMITS)  # fmt: skip
    try:
        wait_for(lambda: _training(out / "logs" / "hostile_bs8_seed0_bf16.log"), 120, "bf16's timed steps")
        cell = wait_for(lambda: _cell_of(tmp_path / "pids.txt", "hostile_bs8_seed0_bf16.log"), 30, "bf16's process")
        os.kill(cell, signal.SIGSTOP)
        stdout, stderr = run.communicate(timeout=120)
    finally:
        _end(run)
    print(f"SIGSTOP test: the run ended in {time.monotonic() - started:.1f} s")
    assert run.returncode == 3, stdout + stderr
    records = _by_precision(out)
    assert records["fp32"]["status"] == "ok"
    assert records["bf16"]["status"] == "failed" and "no heartbeat" in records["bf16"]["reason"]


# -- (b), (c) a stop ends every process of the run, and keeps what was measured -----------------


def _training(log: Path) -> bool:
    return log.exists() and "timed steps: begin" in log.read_text(errors="replace")


def _descendants(pid: int) -> set[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _pids_written(path: Path, kinds: tuple[str, ...] = ("cell", "grandchild", "daemon")) -> set[int]:
    """The pids the cells' builds wrote: each cell's, its grandchild's and its daemon's."""
    lines = [line.split() for line in (path.read_text().split("\n") if path.exists() else [])]
    return {int(words[1]) for words in lines if len(words) == 2 and words[0] in kinds}


def _end(run: subprocess.Popen) -> None:
    if run.poll() is None:
        run.kill()
        run.communicate(timeout=30)


STOPS = {
    "SIGINT": ([signal.SIGINT], 130),
    "SIGTERM": ([signal.SIGTERM], 143),
    "SIGTERM twice": ([signal.SIGTERM, signal.SIGTERM], 143),
    "SIGHUP": ([signal.SIGHUP], 129),
}


def _stopped_mid_run(tmp_path: Path, sent: list[signal.Signals]) -> tuple[subprocess.Popen, str, float, set[int]]:
    """A side-by-side run whose cells hold a non-daemon thread, a grandchild and a daemon each,
    given `sent` once fp32 has finished a window: (the run, its stderr, when it ended, its processes)."""
    pids = tmp_path / "pids.txt"
    # 6 windows of 500 steps. Side by side the turns go fp32 (its last warmup step), bf16, then bf16's
    # first window and fp32's: past 600 forwards fp32 has finished a window.
    matrix = _folder(tmp_path, "holds_on", {"pids": str(pids), "mark_after": 600}, steps=3000)
    out = tmp_path / "out"
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=tmp_path,
                          env=LIMITS)  # fmt: skip
    try:
        wait_for(lambda: Path(f"{pids}.fp32").exists(), 120, "fp32's first window")
        wait_for(lambda: len(_pids_written(pids)) >= 6, 30, "both cells' children")
        run_processes = _descendants(run.pid) | _pids_written(pids)
        assert len(run_processes) >= 9  # forkserver, resource tracker, 2 cells, 2 x (grandchild, daemon) ...
        for signum in sent:
            run.send_signal(signum)
            time.sleep(0.3)
        _, stderr = run.communicate(timeout=30)
        return run, stderr, time.monotonic(), run_processes
    finally:
        _end(run)


@pytest.mark.parametrize("stop", list(STOPS))
def test_a_stop_ends_every_process_of_the_run_and_keeps_the_windows_measured(tmp_path, stop):
    sent, code = STOPS[stop]
    run, stderr, stopped, run_processes = _stopped_mid_run(tmp_path, sent)
    assert run.returncode == code, stderr
    left = wait_for_none_alive(run_processes, stopped + 10)
    assert not left, f"alive 10 s after the stop: {left}"
    out = tmp_path / "out"
    assert stderr.count("\n") == 1 and f"stopped by {sent[0].name}" in stderr and "--resume" in stderr, stderr
    assert str(out / "results.jsonl") in stderr
    records = _by_precision(out)  # the stop message is true: the file is there, with both cells
    assert {r["status"] for r in records.values()} == {"interrupted"}
    assert all(r["reason"].startswith(f"interrupted by {sent[0].name}") for r in records.values())
    assert len(records["fp32"]["throughput_windows"]) >= 1  # the window it finished


def test_a_killed_run_leaves_no_process_behind(tmp_path):
    """SIGKILL: the suite can do nothing. Its cells find their pipe broken at their next heartbeat
    and end with everything below them; the forkserver and the resource tracker end with them."""
    run, _, stopped, run_processes = _stopped_mid_run(tmp_path, [signal.SIGKILL])
    assert run.returncode == -signal.SIGKILL
    left = wait_for_none_alive(run_processes, stopped + 10)
    assert not left, f"alive 10 s after the kill: {left}"


def wait_for_none_alive(pids: set[int], deadline: float) -> set[int]:
    while time.monotonic() < deadline:
        if not any(process_alive(pid) for pid in pids):
            return set()
        time.sleep(0.2)
    return {pid for pid in pids if process_alive(pid)}


def test_a_cell_whose_children_hold_its_pipe_ends_and_the_run_finishes(tmp_path):
    """A non-daemon thread and children that hold the record pipe open: once it has sent its
    record the cell exits, and the run goes on to the next cell and its verdict."""
    pids = tmp_path / "pids.txt"
    matrix = _folder(tmp_path, "holds_on", {"pids": str(pids)})
    done = amp_suite("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=tmp_path, env=LIMITS,
                     timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert {r["status"] for r in read_records(tmp_path / "out")} == {"ok"}
    left = wait_for_none_alive(_pids_written(pids), time.monotonic() + 10)
    assert not left, f"the cells' children outlived the run: {left}"


# -- (d) the working directory cannot shadow a dependency ----------------------------------------

SHADOW = 'raise ImportError("this {name}.py in the working directory was imported instead of the real {name}")\n'


def test_a_datasets_or_torch_module_in_the_working_directory_does_not_break_a_run(tmp_path):
    for name in ("datasets", "torch"):
        (tmp_path / f"{name}.py").write_text(SHADOW.format(name=name))
    (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(tiny_matrix(precisions=["fp32"])))
    # As `python -m amp_suite` (the tests' way, and a user's without the console script): the working
    # directory is first on the run's own path, and multiprocessing hands that path to every cell.
    done = amp_suite("run", "--matrix", "matrix.yaml", "--out", "out", "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r["status"] for r in read_records(tmp_path / "out")] == ["ok"]
    console = [str(Path(sys.executable).parent / "amp-suite"), "run", "--matrix", "matrix.yaml", "--out", "out2",
               "--device", "cpu"]  # fmt: skip
    again = subprocess.run(console, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
