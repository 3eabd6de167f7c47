"""scripts/bench_overhead.py end to end: the suite's CLI and the bare loop in lockstep (SIGSTOP and
SIGCONT of two process groups), on the same trajectory, and its exit code on the budget."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_overhead.py"


@pytest.mark.slow
def test_a_lockstep_pair_compares_cpu_and_wall_time_and_a_missed_budget_exits_1():
    # A budget no harness can meet (the suite 2x faster than the bare loop): exit 1, and why.
    command = [sys.executable, str(SCRIPT), "--pairs", "1", "--steps", "40", "--warmup", "2",
               "--precisions", "fp32,fp16", "--max-overhead", "-1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    for mode in ("fp32", "fp16"):  # the final losses agreed, or the script would have stopped
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"{mode}: "))
        cpu, wall = (float(x) for x in re.findall(r"(?:CPU|wall) time median ([0-9.]+)", line))
        assert 0.2 < cpu < 5 and 0.2 < wall < 5, line  # ratios of real timings, not placeholders
    assert "fp16/fp32 speedup in CPU time: suite" in done.stdout
    assert "OVER the -100% budget: fp32, fp16" in done.stdout
