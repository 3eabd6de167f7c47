"""scripts/bench_overhead.py end to end: the suite's CLI and the bare loop in lockstep (SIGSTOP and
SIGCONT of two process groups) or in turn, on the same trajectory, and its exit code on the budget."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

SCRIPT = REPO / "scripts" / "bench_overhead.py"


@pytest.mark.slow
def test_a_lockstep_pair_compares_cpu_and_wall_time_and_a_missed_budget_exits_1():
    # A budget no harness can meet (the suite 2x faster than the bare loop): exit 1, and why. One
    # mode: every mode's pair is sliced alike, and a second costs two more processes (the lines that
    # compare modes are the next test's).
    command = [sys.executable, str(SCRIPT), "--pairs", "1", "--steps", "40", "--warmup", "2",
               "--precisions", "fp32", "--max-overhead", "-1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    # The final losses agreed, or the script would have stopped.
    line = next(line for line in done.stdout.splitlines() if line.startswith("fp32: "))
    cpu, wall = (float(x) for x in re.findall(r"(?:CPU|wall) time median ([0-9.]+)", line))
    # Ratios of real timings, not placeholders. One pair is one sample: a busy machine (another
    # process beside the bare side) moved one to 5.4x, so the bounds only rule out the absurd.
    assert 0.1 < cpu < 10 and 0.1 < wall < 10, line
    assert done.stdout.splitlines()[-1].startswith("overhead OVER -100% in fp32 (median")


@pytest.mark.slow
def test_pairs_in_turn_run_every_mode_in_one_process_a_side_and_pass_a_budget_they_meet():
    """--sequential, the driver --device cuda uses: a pair is one `amp-suite run` of every mode's
    cell and one bare process of every mode's loop, one after the other; each mode gets a line."""
    command = [sys.executable, str(SCRIPT), "--sequential", "--pairs", "1", "--steps", "20", "--warmup", "2",
               "--precisions", "fp32,fp16", "--max-overhead", "100"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 pair one after the other" in done.stdout
    progress = re.findall(r"^  (fp32|fp16) pair 1 of 1: CPU [0-9.]+, wall [0-9.]+$", done.stdout, re.MULTILINE)
    assert progress == ["fp32", "fp16"], done.stdout
    assert "fp16/fp32 speedup in CPU/wall time: suite" in done.stdout  # each side's verdict, as the suite's
    last = done.stdout.splitlines()[-1]
    assert re.fullmatch(r"overhead within 10000% \(median suite/bare speed, CPU/wall\): fp32 [0-9.]+/[0-9.]+, "
                        r"fp16 [0-9.]+/[0-9.]+", last), last  # fmt: skip


@pytest.mark.slow
def test_sigterm_ends_both_sides_and_reports_the_pairs_that_ended(tmp_path):
    """gpu-check's stage budget ends with SIGTERM: the sides (sessions of their own, out of the
    signal's reach) are ended with the driver, and the pairs already done are still reported."""
    command = [sys.executable, str(SCRIPT), "--sequential", "--pairs", "3", "--steps", "20", "--warmup", "2",
               "--precisions", "fp32"]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # inherited by the sides and all they start
    bench = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    for line in bench.stdout:  # until the first pair has ended and the second has begun
        lines.append(line)
        if "fp32 pair 1 of 3" in line:
            break
    time.sleep(2)
    assert len(sides_running(tmp_path)) > 1, "the second pair should be running"
    bench.send_signal(signal.SIGTERM)
    output = "".join(lines) + bench.stdout.read()
    assert bench.wait(60) == 128 + signal.SIGTERM, output
    assert "stopped by SIGTERM: the figures of the pairs that ended" in output
    assert re.search(r"^fp32: CPU time median [0-9.]+ \(pairs", output, re.MULTILINE), output  # the one pair
    assert output.splitlines()[-1].startswith("overhead "), output
    assert not sides_running(tmp_path) and not list(tmp_path.glob("tmp*"))  # nothing left running; scratch gone


def sides_running(folder: Path) -> list[int]:
    """Processes whose environment names this TMPDIR: the bench's sides and everything they started."""
    marker = f"TMPDIR={folder}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return found


def test_the_suite_side_runs_the_bare_loop_s_work_no_evaluations_and_its_modes_whole(tmp_path, monkeypatch):
    """Like for like: smoke's MLP declares a target (an evaluation every 10 steps, each a sync and
    two NVML readings on a GPU); the bare loop never evaluates, so the benchmark's copy drops it."""
    import importlib.util

    import yaml

    loaded = importlib.util.spec_from_file_location("bench_overhead", SCRIPT)
    bench = importlib.util.module_from_spec(loaded)
    monkeypatch.setitem(sys.modules, "bench_overhead", bench)  # its dataclasses look their module up
    loaded.loader.exec_module(bench)
    matrix = yaml.safe_load(bench.bench_matrix(40, 2, tmp_path).read_text())
    (mlp,) = matrix["workloads"]
    assert "target" not in mlp and mlp["compile"] == [False] and matrix["side_by_side"] is False
    smoke = yaml.safe_load(bench.SMOKE.read_text())
    assert any("target" in w for w in smoke["workloads"] if w["workload"] == "mlp")  # what it dropped
