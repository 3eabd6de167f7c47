"""scripts/gpu-check.sh, run on this CPU machine with a stand-in Python that plays the GPU steps:
the script's own logic (exit codes, where OUT_DIR lands, the one-screen summary) is what's tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO

RECORDS = [
    {"cell_id": "mlp/bs64/fp32", "status": "ok", "throughput": 51234.0, "tflops": 12.5, "mfu": 0.25,
     "energy_j_per_sample": 0.0031, "host_syncs_per_step": 0, "throttled": False,
     "machine": {"device_name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580.1", "torch": "2.14.1",
                 "cuda": "13.0"}},
    {"cell_id": "mlp/bs64/fp16", "status": "failed", "reason": "RuntimeError: CUDA error: an illegal memory access",
     "host_syncs_per_step": 1, "throttled": True, "throttle_reasons": ["sw_thermal_slowdown"]},
]  # fmt: skip


MULTI_GPU_RECORDS = [
    {"cell_id": "mlp/bs256/seed0/fp32", "status": "ok", "throughput": 90000.0,
     "environment": {"cuda_visible_devices": "1"}},
    {"cell_id": "resnet/bs64/seed0/bf16/nhwc/ddp2", "status": "ok", "throughput": 4000.0, "comm_share": 0.12,
     "environment": {"cuda_visible_devices": "0,1"}},
]  # fmt: skip


def stand_in_python(tmp_path, tests_exit: int, run_exit: int, gpus: int = 1, multi_exit: int = 0):
    """A PYTHON that answers the torch checks, 'runs' the GPU tests and the matrices (each call's
    arguments kept in calls.txt), and hands the summary script to the real interpreter."""
    records, multi = tmp_path / "records.jsonl", tmp_path / "multi.jsonl"
    records.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    multi.write_text("".join(json.dumps(record) + "\n" for record in MULTI_GPU_RECORDS))
    stub = tmp_path / "python"
    stub.write_text(f"""#!/usr/bin/env bash
echo "$@" >> {tmp_path / "calls.txt"}
case "$1 $2" in
  "-c "*device_count*) echo {gpus} ;;
  "-c "*) echo "2.14.1 NVIDIA H200 (9, 0)" ;;
  "-m pytest") echo "7 passed in 3.0s"; exit {tests_exit} ;;
  "-m amp_suite") case "$*" in
      *--gpus*) while [ "$1" != --out ]; do shift; done; cp {multi} "$2/results.jsonl"; exit {multi_exit} ;;
      *) while [ "$1" != --out ]; do shift; done; cp {records} "$2/results.jsonl"; exit {run_exit} ;;
    esac ;;
  *) exec {sys.executable} "$@" ;;
esac
""")
    stub.chmod(0o755)
    return stub


def gpu_check(tmp_path, tests_exit=0, run_exit=0, gpus=1, multi_exit=0):
    env = {**os.environ, "PYTHON": str(stand_in_python(tmp_path, tests_exit, run_exit, gpus, multi_exit))}
    caller = tmp_path / "caller"
    caller.mkdir()
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-check.sh"), "out"], cwd=caller, env=env, capture_output=True, text=True
    )
    return done, caller / "out"


def test_a_failed_cell_fails_the_check_and_the_summary_says_which(tmp_path):
    done, out = gpu_check(tmp_path, run_exit=3)
    assert done.returncode != 0
    assert not (REPO / "out").exists()  # a relative OUT_DIR is the caller's, not the checkout's
    screen = (out / "gpu-check.txt").read_text()
    assert screen in done.stdout
    assert "NVIDIA H200 (cc 9.0, driver 580.1, torch 2.14.1, CUDA 13.0)" in screen
    assert "GPU tests: 7 passed in 3.0s (exit 0)" in screen
    assert "matrix: 2 cells: 1 failed, 1 ok (exit 3)" in screen
    assert "51,234/s | 12.5 TFLOP/s | MFU 25% | 0.0031 J/sample | syncs/step 0" in screen
    assert "THROTTLED sw_thermal_slowdown" in screen and "an illegal memory access" in screen
    assert len(screen.splitlines()) <= 40  # one screen


def test_a_failing_gpu_test_fails_the_check(tmp_path):
    done, out = gpu_check(tmp_path, tests_exit=1)
    assert done.returncode != 0 and "(exit 1)" in (out / "gpu-check.txt").read_text()


def test_all_green_exits_zero(tmp_path):
    done, out = gpu_check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "nvidia-smi.txt").exists() and (out / "run.txt").exists()


def test_one_gpu_says_the_multi_gpu_and_ddp_paths_did_not_run(tmp_path):
    done, out = gpu_check(tmp_path, gpus=1)
    assert done.returncode == 0
    assert "multi-GPU and DDP: not run, this machine has 1 GPU" in (out / "gpu-check.txt").read_text()
    assert "gpu-check-multi" not in (tmp_path / "calls.txt").read_text()


def test_two_gpus_run_the_scheduler_and_ddp_and_the_summary_shows_where_each_cell_ran(tmp_path):
    done, out = gpu_check(tmp_path, gpus=2)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (tmp_path / "calls.txt").read_text()
    assert "experiments/gpu-check-multi.yaml" in calls and "--gpus all" in calls
    screen = (out / "gpu-check.txt").read_text()
    assert "multi-GPU and DDP on 2 GPUs: 2 cells: 2 ok (exit 0)" in screen
    assert "comm 12% of a step | on GPU 0,1" in screen and "on GPU 1" in screen
    assert (out / "multi-gpu" / "run.txt").exists()


def test_a_failing_multi_gpu_run_fails_the_check(tmp_path):
    done, out = gpu_check(tmp_path, gpus=2, multi_exit=3)
    assert done.returncode != 0 and "(exit 3)" in (out / "gpu-check.txt").read_text()
