"""Long cells are never silent in a terminal (issue 53): through the CLI under a pseudo-terminal, a
forced slow cell shows its step, pace and time left while it trains, and one printed line estimates
its timed steps before they are done.

The cell is forced fp16 autocast on a CPU: no x86 server CPU these tests land on has fp16 arithmetic
(an EPYC without avx512_bf16 and a Xeon with AMX alike), so each step is emulated and takes a second
or more at this size, on both."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time

import pytest
import yaml
from conftest import cli_env, read_records

pytestmark = pytest.mark.slow
STEPS = 6
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ESTIMATE = re.compile(r"mlp/bs128/seed0/fp16 \(forced\): ~([\d.]+) (s|ms) a step, about .+ for 6 timed steps")
LIVE = re.compile(r"mlp/bs128/seed0/fp16 measure .* (\d+)/6 .*(s/step|steps/s).* left")


def slow_matrix() -> dict:
    return {
        "name": "slow", "seed": 0, "warmup_steps": 2, "steps": STEPS, "stopping": "fixed", "precisions": ["fp16"],
        "workloads": [{"workload": "mlp", "in_features": 256, "hidden": 1024, "depth": 4, "batch_sizes": [128],
                       "samples": 256, "force": ["fp16"], "data": {"source": "synthetic", "val_samples": 128}}],
    }  # fmt: skip


def run_in_a_terminal(args: list[str], cwd, timeout: float = 240) -> tuple[int, list[tuple[float, str]]]:
    """The CLI with a pseudo-terminal as its stdout and stderr: (its exit code, every line of what it
    drew, each with the seconds since the start at which it was read), escape codes left out."""
    leader, follower = os.openpty()
    env = cli_env({"COLUMNS": "160", "LINES": "40", "TERM": "xterm"})
    process = subprocess.Popen([sys.executable, "-m", "amp_suite", *args], cwd=cwd, env=env,
                               stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)  # fmt: skip
    os.close(follower)
    started, seen, pending = time.monotonic(), [], ""
    try:
        while time.monotonic() - started < timeout:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536).decode(errors="replace")
            except OSError:  # the terminal's other end closed: the CLI has exited
                break
            pending += ANSI.sub("", chunk)
            *lines, pending = re.split(r"[\r\n]", pending)
            seen += [(time.monotonic() - started, line) for line in lines if line.strip()]
    finally:
        process.kill() if process.poll() is None else None
        os.close(leader)
    return process.wait(timeout=30), seen


def first(seen: list[tuple[float, str]], pattern: re.Pattern) -> tuple[float, re.Match] | None:
    return next(((at, found) for at, line in seen if (found := pattern.search(line))), None)


def test_a_forced_slow_cell_shows_its_pace_and_an_estimate_while_it_trains(tmp_path):
    (tmp_path / "slow.yaml").write_text(yaml.safe_dump(slow_matrix()))
    out = tmp_path / "out"
    code, seen = run_in_a_terminal(["run", "--matrix", "slow.yaml", "--out", str(out), "--device", "cpu"], tmp_path)
    screen = "\n".join(line for _, line in seen)
    assert code == 0, screen[-3000:]
    (record,) = read_records(out)
    step_s = record["step_time_ms_p50"] / 1e3
    finished = first(seen, re.compile(r"ok mlp/bs128/seed0/fp16"))
    estimate, live = first(seen, ESTIMATE), first(seen, LIVE)
    assert finished and estimate and live, screen[-3000:]
    # The estimate comes before the timed steps end, and is about the step time they took.
    assert estimate[0] < finished[0]
    guessed_s = float(estimate[1].group(1)) / (1e3 if estimate[1].group(2) == "ms" else 1)
    assert step_s / 3 < guessed_s < step_s * 3, (guessed_s, step_s)
    # The live bar names the step, its pace and the time left while steps remain, within 10 s of the
    # estimate (which is printed as the timed steps begin)...
    assert int(live[1].group(1)) < STEPS and live[0] - estimate[0] < 10, screen[-3000:]
    # ... and a cell whose steps take a second or more is seen to move before it ends.
    assert finished[0] - live[0] > step_s, (live[0], finished[0])
    # The matrix's time left: unknown until a cell has timed steps, and said so.
    assert "time left unknown" in screen
