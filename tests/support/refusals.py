"""Running the CLI on bad input, and what a refusal must look like: exit 2, one line, quick, small."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import cli_env

# Runs the CLI and reports, from a fresh parent, the largest resident set any of its processes had.
MEASURE = """
import json, resource, subprocess, sys, time
started = time.monotonic()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=120)
print(json.dumps({"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                  "seconds": time.monotonic() - started,
                  "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def run_measured(*args: str, cwd: Path, env: dict[str, str] | None = None) -> dict:
    command = [sys.executable, "-c", MEASURE, sys.executable, "-m", "amp_suite", *args]
    # Unmeasured by coverage (conftest.COVERAGE_HANDOFF): its seconds and memory are the refusal's own.
    done = subprocess.run(command, cwd=cwd, env=cli_env(env, measured=False), capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    return json.loads(done.stdout)


def assert_refused(result: dict, expected: str, seconds: float = 10, peak_mb: float = 400) -> None:
    stderr = result["stderr"]
    assert result["code"] == 2, result
    assert stderr.count("\n") == 1 and stderr.startswith("amp-suite: error: ") and "Traceback" not in stderr, stderr
    assert expected in stderr, stderr
    assert result["seconds"] < seconds, result["seconds"]
    assert result["peak_mb"] < peak_mb, result["peak_mb"]
