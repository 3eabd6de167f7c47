"""scripts/gpu-check.sh, run on this CPU machine with a stand-in Python that plays the GPU steps:
the script's own logic (stages under time budgets, the summary appended after each, at most 8
files in OUT_DIR, exit codes) and the summary's PASS/FAIL checks of synthetic records are tested."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time

import pytest
import yaml
from conftest import REPO

SUMMARY = REPO / "scripts" / "gpu_check_summary.py"
REHEARSAL = REPO / "scripts" / "gpu_check_rehearsal.py"
UUID = "GPU-5c3d2a1b-0e9f-4a8b-9c7d-6e5f4a3b2c1d"
MACHINE = {"device_name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580.1", "torch": "2.14.1",
           "cuda": "13.0"}  # fmt: skip
OUT_FILES = {"gpu-check.txt", "results.jsonl", "bundle.tar.gz"}
STAGES = ["probe", "gpu-tests", "float8-bench", "batch-search", "matrix", "resnet", "fp8", "compile", "overhead"]
BEFORE_COMPILE = STAGES[: STAGES.index("compile")]
OVERHEAD = "overhead within 2% (median suite/bare speed, CPU/wall): fp32 0.995/0.991, tf32 0.990/0.993, bf16 0.987/0.990, fp16 0.985/0.989"  # noqa: E501


def record(matrix: str, workload: str, precision: str, compile: str = "off", batch: int = 16, **fields) -> dict:
    """A cell's record with the fields the summary reads: 400 steps of 16 at 3,200 samples/s time 2 s."""
    cell_id = f"{workload}/bs{batch}/seed0/{precision}" + ("" if compile == "off" else f"/compile-{compile}")
    return {
        "cell_id": cell_id, "matrix": matrix, "workload": workload, "precision": precision, "compile": compile,
        "status": "ok", "device": "cuda", "batch_size": batch, "steps": 400, "throughput": 3200.0,
        "tflops": 120.0, "peak_tflops": 494.7, "mfu": 0.24, "energy_j": 900.0, "energy_j_per_sample": 0.14,
        "host_syncs_per_step": 0, "warmup_s": 31.0, "machine": MACHINE,
        "gpu_busy_ms_per_step": 4.0, "gpu_idle_fraction": 0.2, "step_time_ms_p50": 5.0, "matmul_flop_share": 0.99,
        "seed": 0, "config": {"workload": {"workload": workload}, "precision": precision},
        "environment": {"gpu_uuid": UUID},
    } | fields  # fmt: skip


def evaluated(timed_s: float = 2.0) -> dict:
    """Time to target's fields: 400 steps evaluated every 100, the runs' spans adding up to `timed_s`."""
    curve = [{"step": 10 + 100 * n, "train_s": timed_s * n / 4, "metric": 60.0 - n} for n in range(1, 5)]
    return {"eval_every": 100, "eval_curve": curve, "eval_s": 0.4}


def fp8_ran(scaled: int = 15) -> dict:
    """What an fp8 cell's record shows of its float8 matmuls: 5 layers, 3 scaled matmuls each a step."""
    audit = {"ops": [{"phase": "forward", "op": "_scaled_mm", "calls": 5}, {"phase": "backward", "op": "_scaled_mm",
             "calls": scaled - 5}]} if scaled else {"ops": []}  # fmt: skip
    return {"matmul_dtype": "float8_e4m3fn", "fp8_layers": 5, "dtype_audit": audit}


def float8_benchmark(precision: str, shape: tuple[int, int, int], kernel_ms: float) -> dict:
    """A cell of torchao's float8 benchmark: timed by its kernels, no GPU-work trace of its own."""
    rows, in_features, out_features = shape
    config = {"workload": {"workload": "torchao-float8-linear", "in_features": in_features,
                           "out_features": out_features}, "precision": precision}  # fmt: skip
    fields = {"steps": 20, "throughput": rows / kernel_ms * 1e3, "kernel_ms_per_step": kernel_ms,
              "config": config, "gpu_busy_ms_per_step": None, "gpu_idle_fraction": None}  # fmt: skip
    return record("torchao-float8", "torchao-float8-linear", precision, "default", batch=rows, **fields)


SMALL, LARGE = (1024, 2048, 1024), (4096, 8192, 16384)


def search(found: int, limited_by: str = "memory") -> dict:
    return {"batch_search": {"found": found, "limited_by": limited_by, "probes": [[8, "ok"], [found + 1, "oom"]]}}


# The matrix stage's comparison took turns: 6 windows, each turn's first step not timed (394 of 400 timed).
SIDE_BY_SIDE = {"side_by_side_id": "a1b2", "untimed_steps": 6, "throughput_spread": 0.02}


def green() -> dict[str, list[dict]]:
    """Each matrix's records when everything works, by matrix name."""
    return {
        "torchao-float8": [
            float8_benchmark("bf16", SMALL, 0.100), float8_benchmark("fp8-tensorwise", SMALL, 0.125),
            float8_benchmark("fp8-rowwise", SMALL, 0.130), float8_benchmark("bf16", LARGE, 5.56),
            float8_benchmark("fp8-tensorwise", LARGE, 4.00), float8_benchmark("fp8-rowwise", LARGE, 4.40),
        ],
        "gpu-check-resnet": [record("gpu-check-resnet", "resnet", p, channels_last=layout, **SIDE_BY_SIDE)
                             for layout in (False, True) for p in ("fp32", "bf16")],
        "gpu-check-batch": [
            record("gpu-check-batch", "transformer", "fp32", batch=8, **search(8)),
            record("gpu-check-batch", "transformer", "bf16", batch=14, **search(14)),
        ],
        "gpu-check": [record("gpu-check", "transformer", p, **SIDE_BY_SIDE, **evaluated(16 * 394 / 3200))
                      for p in ("fp32", "tf32", "fp16", "bf16")],
        "gpu-check-fp8": [
            record("gpu-check-fp8", "mlp", "bf16", "default", batch=8192, throughput=80000.0),
            record("gpu-check-fp8", "mlp", "fp8-tensorwise", "default", batch=8192, throughput=100000.0, **fp8_ran()),
            record("gpu-check-fp8", "t5", "bf16"),
            record("gpu-check-fp8", "t5", "fp8-tensorwise", status="skipped", reason="fp8 training runs compiled"),
        ],
        "gpu-check-compile": [
            record("gpu-check-compile", "mlp", "tf32"),
            record("gpu-check-compile", "mlp", "tf32", "reduce-overhead"),
            record("gpu-check-compile", "mlp", "tf32", "max-autotune"),
            record("gpu-check-compile", "transformer", "tf32", "reduce-overhead"),
        ],
        "gpu-check-multi": [
            record("gpu-check-multi", "resnet", "bf16", environment={"gpu_uuid": UUID, "cuda_visible_devices": "1"}),
            record("gpu-check-multi", "resnet-ddp", "bf16", world_size=2, comm_share=0.12, mfu=0.3,
                   config={"workload": {"workload": "resnet"}},
                   environment={"gpu_uuid": UUID, "cuda_visible_devices": "0,1"}),
        ],
    }  # fmt: skip


STUB = r"""#!/usr/bin/env bash
# The GPU machine's Python, played: the probe, the GPU tests and each matrix answer from files the
# test wrote (records to append, an exit code, a hang); anything else goes to the real Python.
here=$(dirname "$0")
echo "$*" >> "$here/calls.txt"
case "$1 ${2:-}" in
  "-c "*) echo "gpus $(cat "$here/gpus")"; echo "torch 2.14.1, CUDA 13.0: NVIDIA H200, cc (9, 0)"
          exit "$(cat "$here/probe.exit")" ;;
  "-m pytest") echo "7 passed, 1 deselected in 3.0s"
               if [ -f "$here/tests.hang" ]; then while [ ! -f "$here/release" ]; do sleep 0.1; done; fi
               exit "$(cat "$here/tests.exit")" ;;
  "-m amp_suite") ;;
  "scripts/import_check.py ") echo "python 3.12.3; CUDA 13.0, 1 GPU(s) visible"; cat "$here/import.said"
                              exit "$(cat "$here/import.exit")" ;;
  "scripts/bench_overhead.py "*) echo "${PYTHONPATH:-}" > "$here/overhead.pythonpath"
                                 echo "  fp32 pair 1 of 2: CPU 0.995, wall 0.991"; echo "OVERHEAD"
                                 [ -f "$here/overhead.hang" ] && while [ ! -f "$here/release" ]; do sleep 0.1; done
                                 exit "$(cat "$here/overhead.exit")" ;;
  *) exec REAL "$@" ;;
esac
while [ $# -gt 0 ]; do
  case "$1" in --matrix) matrix=$(basename "$2" .yaml); shift ;; --out) out=$2; shift ;; esac; shift
done
mkdir -p "$out/logs"  # what a real run leaves: more files than may come back from the machine
for cell in 1 2 3 4 5 6; do echo log > "$out/logs/$matrix-$cell.log"; done
echo db > "$out/mlflow.db"; echo '{}' >> "$out/invocations.jsonl"
cat "$here/$matrix.jsonl" >> "$out/results.jsonl"
echo "$matrix PYTHONPATH=${PYTHONPATH:-} cap=${GPU_CHECK_MEMORY_CAP_MB:-}" >> "$here/matrices.txt"  # its records are in
if [ -f "$here/$matrix.hang" ]; then while [ ! -f "$here/release" ]; do sleep 0.1; done; fi
exit "$(cat "$here/$matrix.exit")"
"""

NVIDIA_SMI = f"""#!/usr/bin/env bash
[ "${{1:-}}" = -L ] && echo "GPU 0: NVIDIA H200 (UUID: {UUID})" || echo "| NVIDIA-SMI 580.1 |"
"""


def stand_in(
    tmp_path, matrices=None, exits=None, hang=(), gpus=1, tests_exit=0, probe_exit=0, overhead_exit=0,
    imports="120 of 120 modules import",
):
    """The stand-in's folder: python, nvidia-smi, and what each matrix does."""
    here = tmp_path / "stand-in"
    (here / "bin").mkdir(parents=True)
    python = STUB.replace("REAL", sys.executable).replace("OVERHEAD", OVERHEAD)
    for name, text in (("python", python), ("bin/nvidia-smi", NVIDIA_SMI)):
        (here / name).write_text(text)
        (here / name).chmod(0o755)
    (here / "gpus").write_text(str(gpus))
    (here / "tests.exit").write_text(str(tests_exit))
    (here / "probe.exit").write_text(str(probe_exit))
    (here / "import.said").write_text(imports + "\n")
    (here / "import.exit").write_text("0" if imports.startswith("120 of 120") else "1")
    (here / "overhead.exit").write_text(str(overhead_exit))
    for matrix, records in (matrices or green()).items():
        (here / f"{matrix}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (here / f"{matrix}.exit").write_text(str((exits or {}).get(matrix, 0)))
    for name in hang:  # a matrix's name, or "tests" or "overhead"
        (here / f"{name}.hang").touch()
    return here


def script_env(tmp_path, here, **budgets) -> dict[str, str]:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "PYTHON": str(here / "python"), "PATH": f"{here / 'bin'}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    env |= {"TMPDIR": str(tmp_path / "tmp")} | {f"GPU_CHECK_TIMEOUT_{k.upper()}": str(v) for k, v in budgets.items()}
    return env


def gpu_check(tmp_path, budgets=None, **behaviour):
    here = stand_in(tmp_path, **behaviour)
    caller = tmp_path / "caller"
    caller.mkdir()
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu-check.sh"), "out"],
        cwd=caller, env=script_env(tmp_path, here, **(budgets or {})), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = caller / "out"
    assert_few_files(out)
    return done, out, here


def assert_few_files(out):
    """What comes back from a borrowed GPU machine: at most 8 files."""
    files = [path for path in out.rglob("*") if path.is_file()]
    assert len(files) <= 8, files
    assert {path.name for path in files} <= OUT_FILES, files


def screen(out) -> str:
    return (out / "gpu-check.txt").read_text()


def test_all_green_appends_each_stage_checks_every_fact_and_leaves_three_files(tmp_path):
    done, out, here = gpu_check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (REPO / "out").exists()  # a relative OUT_DIR is the caller's, not the checkout's
    text = screen(out)
    assert text.splitlines()[-2] == "gpu-check: PASS"
    checks_block = text[text.index("machine: ") :]
    assert done.stdout.endswith(checks_block) and all(line in done.stdout for line in text.splitlines())  # printed
    assert len(text.splitlines()) <= 55  # one screen
    blocks = [text.index(f"[{name}] exit 0") for name in STAGES]
    assert blocks == sorted(blocks), text  # appended in the order the stages ran
    assert "[gpu-tests] exit 0" in text and "7 passed, 1 deselected" in text
    assert "[compile] exit 0" in text and "gpu-check-compile: 4 cells: 4 ok" in text
    # the bench's last line, its time beside the script's estimate
    assert re.search(rf"\[overhead\] exit 0, \d+ s \(estimate ~30 s\) of 150 s: {re.escape(OVERHEAD)}\n", text)
    assert "transformer/bs16/seed0/fp32" in text and "3,200/s | 120.0 TFLOP/s | MFU 24% | 0.14 J/sample" in text
    assert "timed 2.0 s" in text and "largest batch 14 (memory)" in text
    assert "multi-GPU and DDP: not run, this machine has 1 GPU" in text
    for line in ("PASS batch search: bf16 fits a larger batch than fp32: bf16 14 (memory), fp32 8 (memory), 1.75x",
                 "PASS compiled cells ended ok: 3 of 3", "PASS MFU present and <= 1", "n/a  MFU <= 1 for DDP cells",
                 "PASS energy (NVML) recorded for every ok cell: 23 cells", "PASS environment.gpu_uuid",
                 "PASS fp8 ran float8 matmuls (speed vs bf16): mlp/bs8192/seed0/fp8-tensorwise/compile-default:"
                 " matmul dtype float8_e4m3fn, 15 scaled matmuls, 5 fp8 layers; 1.25x bf16 (100,000/s vs 80,000/s)",
                 "PASS torchao float8 benchmark (fp8 / bf16 in kernel time): M, K, N = 1024, 2048, 1024:"
                 " fp8-tensorwise 0.80x, fp8-rowwise 0.77x (published 0.80x on an H100 80GB HBM3); M, K, N = 4096,"
                 " 8192, 16384: fp8-tensorwise 1.39x, fp8-rowwise 1.26x (published 1.39x on an H100 80GB HBM3)"):
        assert line in text, (line, text)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 24  # every matrix's records, in one file
    with tarfile.open(out / "bundle.tar.gz") as bundle:
        names = set(bundle.getnames())
    assert {"./nvidia-smi.txt", "./gpu-tests.txt", "./stages.tsv", "./run/mlflow.db", "./run/results.jsonl"} <= names
    assert sum(name.startswith("./run/logs/") for name in names) == 36  # 6 stand-in logs a matrix
    calls = (here / "calls.txt").read_text()
    assert "-m pytest -m gpu -k not largest_batch" in calls  # its batch search is the batch-search stage's
    assert "experiments/gpu-check.yaml" in calls and "--device cuda" in calls and "gpu-check-multi" not in calls
    assert "scripts/bench_overhead.py --device cuda --pairs 1 --steps 1000 --precisions fp32,bf16" in calls
    assert (here / "overhead.pythonpath").read_text().strip().split(":")[0] == str(REPO)  # this checkout's amp_suite
    runs = (here / "matrices.txt").read_text().splitlines()
    assert [run.split()[0] for run in runs] == ["torchao-float8", "gpu-check-batch", "gpu-check", "gpu-check-resnet",
                                                "gpu-check-fp8", "gpu-check-compile"]  # fmt: skip
    capped = runs.pop(1)  # the batch search's, alone
    assert "hooks cap=2048" in capped and all(run.endswith("PYTHONPATH= cap=") for run in runs)


def test_the_batch_search_cap_is_queued_for_when_cuda_starts(tmp_path):
    """The batch-search stage's sitecustomize caps every GPU's allocator at 2 GiB, in the process
    that starts CUDA (a cell), not at import (the forkserver must never start CUDA)."""
    script = (REPO / "scripts" / "gpu-check.sh").read_text()
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(script.split("<<'PY'\n")[1].split("\nPY\n")[0])
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "from types import SimpleNamespace\nqueued, capped = [], []\n"
        "cuda = SimpleNamespace(_lazy_call=queued.append, device_count=lambda: 2,\n"
        "    get_device_properties=lambda i: SimpleNamespace(total_memory=8 * 2**30),\n"
        "    set_per_process_memory_fraction=lambda fraction, index: capped.append((fraction, index)))\n"
    )
    code = "import torch; before = list(torch.capped); [f() for f in torch.queued]; print(before, torch.capped)"
    env = {**os.environ, "PYTHONPATH": f"{fake.parent}:{hooks}", "GPU_CHECK_MEMORY_CAP_MB": "2048"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "[] [(0.25, 0), (0.25, 1)]", done.stdout + done.stderr


def test_a_stage_that_hangs_is_stopped_at_its_budget_and_the_rest_still_runs(tmp_path):
    done, out, _ = gpu_check(tmp_path, budgets={"matrix": 2}, hang={"gpu-check"})
    assert done.returncode != 0
    text = screen(out)
    for name in ("probe", "gpu-tests", "batch-search", "compile"):
        assert f"[{name}] exit 0" in text, text
    assert "[matrix] TIMED OUT after" in text and "s (estimate ~75 s) of 2 s: gpu-check: 4 cells: 4 ok" in text
    assert "gpu-check: FAIL: matrix exit 124" in text


@pytest.mark.parametrize("gpus", [1, 2])
def test_every_stage_hanging_ends_within_the_one_deadline_and_the_summary_says_which_ran(tmp_path, gpus):
    """gpu-check.sh's deadline (540 s) holds for every stage, the multi-GPU one too: here 14 s, each
    stage's budget 3 s, and every stage but the probe hangs."""
    hang = {"tests", "overhead", "torchao-float8", "gpu-check-batch", "gpu-check", "gpu-check-resnet", "gpu-check-fp8",
            "gpu-check-compile", "gpu-check-multi"}  # fmt: skip
    budgets = {stage.replace("-", "_"): 3 for stage in STAGES[1:] + ["multi-gpu"]} | {"total": 14}
    started = time.monotonic()
    try:
        done, out, _ = gpu_check(tmp_path, budgets=budgets, hang=hang, gpus=gpus)
    finally:
        (tmp_path / "stand-in" / "release").touch()
    took = time.monotonic() - started
    assert done.returncode != 0 and took < 14 + 10, took  # the deadline, and the summary's own seconds
    text = screen(out)
    stages = [*STAGES[1:-1], *(["multi-gpu"] if gpus >= 2 else []), "overhead"]
    ran = [name for name in stages if f"[{name}] TIMED OUT" in text]
    cut = [name for name in stages if f"[{name}] not run: the deadline" in text]
    assert ran + cut == stages, text  # each stage said: ran out of its budget, or never started
    assert ran[:2] == ["gpu-tests", "float8-bench"] and cut[-1] == "overhead", text  # in order, the last cut
    assert "(estimate ~30 s)" in text and "gpu-check: FAIL: gpu-tests exit 124" in text  # which, and why


def test_the_deadline_holds_every_stage_to_540_s_and_the_estimates_leave_a_minute_of_it_on_one_gpu():
    script = (REPO / "scripts" / "gpu-check.sh").read_text()
    assert 'total_s=$([ "$rehearse" = 1 ] && echo 900 || echo 540)' in script  # a lease's 540 s; a rehearsal's 900
    assert "deadline=$((started + ${GPU_CHECK_TIMEOUT_TOTAL:-$total_s}))" in script
    assert script.count("deadline=") == 1  # set once: no stage gets a deadline of its own
    estimates = {m[1]: int(m[2]) for m in re.finditer(r"^\s*(?:if ! )?stage ([a-z0-9-]+) (\d+) (\S+) ", script, re.M)}
    assert list(estimates) == [*STAGES[:-1], "multi-gpu", "overhead"]
    assert sum(v for k, v in estimates.items() if k != "multi-gpu") <= 480, estimates  # a minute under the deadline


def start_in_background(tmp_path, **behaviour):
    here = stand_in(tmp_path, **behaviour)
    script = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "gpu-check.sh"), str(tmp_path / "out")], env=script_env(tmp_path, here),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while "gpu-check-compile" not in _read(here / "matrices.txt") and time.monotonic() < deadline:
        time.sleep(0.1)  # until the compile stage has started: every stage before it has ended
    return script, here, tmp_path / "out"


def test_a_run_killed_from_outside_leaves_the_summary_of_the_stages_that_ended(tmp_path):
    """The machine taken back mid-stage: no trap runs, yet OUT_DIR holds the finished stages'
    summary, records and bundle, and nothing else."""
    script, here, out = start_in_background(tmp_path, hang={"gpu-check-compile"})
    try:
        os.killpg(script.pid, signal.SIGKILL)
        script.wait(10)
    finally:
        (here / "release").touch()  # the stand-in's hang ends; timeout(1), in a group of its own, with it
    text = screen(out)
    assert all(f"[{name}] exit 0" in text for name in BEFORE_COMPILE) and "[compile]" not in text, text
    # float8-bench 6, batch-search 2, matrix 4, resnet 4, fp8 4
    assert len((out / "results.jsonl").read_text().splitlines()) == 20
    assert_few_files(out)


def test_a_run_stopped_by_sigterm_stops_its_stage_and_says_so(tmp_path):
    script, here, out = start_in_background(tmp_path, hang={"gpu-check-compile"})
    try:
        script.send_signal(signal.SIGTERM)
        assert script.wait(30) == 143
    finally:
        (here / "release").touch()
    text = screen(out)
    assert all(f"[{name}] exit 0" in text for name in BEFORE_COMPILE), text
    assert text.splitlines()[-1].startswith("gpu-check: stopped by SIGTERM during the compile stage")
    assert "PASS batch search" in text and "PASS compiled cells ended ok" in text  # the checks of what it has
    assert len((out / "results.jsonl").read_text().splitlines()) == 24  # the compile stage's too
    assert_few_files(out)


def test_failures_fail_the_check_and_the_summary_says_which(tmp_path):
    """A failing GPU test, a failed cell (amp-suite exits 3), a harness over its overhead budget and
    a batch search in which bf16 found no more than fp32: each is named, and the script exits non-zero."""
    matrices = green()
    matrices["gpu-check-batch"][1] = record("gpu-check-batch", "transformer", "bf16", batch=8, **search(8))
    matrices["gpu-check"][2] = record("gpu-check", "transformer", "fp16", status="failed",
                                      reason="RuntimeError: CUDA error: an illegal memory access")  # fmt: skip
    done, out, _ = gpu_check(tmp_path, matrices=matrices, exits={"gpu-check": 3}, tests_exit=1, overhead_exit=1)
    assert done.returncode != 0
    text = screen(out)
    assert "[gpu-tests] exit 1" in text and "[matrix] exit 3" in text and "1 failed, 3 ok" in text
    assert "an illegal memory access" in text
    assert "FAIL batch search: bf16 fits a larger batch than fp32: bf16 8 (memory), fp32 8 (memory)" in text
    assert "[overhead] exit 1" in text
    assert "gpu-check: FAIL: gpu-tests exit 1; matrix exit 3; overhead exit 1; check batch search" in text


def test_no_gpu_stops_after_the_probe(tmp_path):
    done, out, here = gpu_check(tmp_path, probe_exit=1)
    assert done.returncode != 0
    assert "[probe] exit 1" in screen(out) and "nothing else was run" in screen(out)
    assert "-m pytest" not in (here / "calls.txt").read_text()


def test_a_module_that_does_not_import_stops_after_the_probe_and_says_which(tmp_path):
    """A box's own Python without a package (say, wheels left behind) fails in seconds, not minutes in."""
    said = "119 of 120 modules import; failed: ['torchao.float8']"
    done, out, here = gpu_check(tmp_path, imports=said)
    assert done.returncode != 0
    assert "[probe] exit 1" in screen(out) and said in screen(out) and "nothing else was run" in screen(out)
    assert "-m pytest" not in (here / "calls.txt").read_text()


def test_two_gpus_run_the_scheduler_and_ddp_and_judge_ddp_mfu(tmp_path):
    done, out, here = gpu_check(tmp_path, gpus=2)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (here / "calls.txt").read_text()
    assert "experiments/gpu-check-multi.yaml" in calls and "--gpus all" in calls
    text = screen(out)
    assert "[multi-gpu] exit 0" in text and "gpu-check-multi: 2 cells: 2 ok" in text
    assert "comm 12% of a step | on GPU 0,1" in text and "on GPU 1" in text
    assert "PASS MFU <= 1 for DDP cells on 2+ GPUs: 1 cells, highest 30%" in text


def _read(path) -> str:
    return path.read_text() if path.exists() else ""


# -- the checks alone: synthetic records, each fact broken once ---------------------------------


def checks(tmp_path, records: list[dict], gpus: int = 1, listed: str = UUID, stages: str = "probe\t0\t1\t60\n"):
    work = tmp_path / "work"
    (work / "run").mkdir(parents=True)
    (work / "run" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (work / "nvidia-smi.txt").write_text(f"GPU 0: NVIDIA H200 (UUID: {listed})\n")
    (work / "stages.tsv").write_text(stages)
    command = [sys.executable, str(SUMMARY), "checks", str(work), "--gpus", str(gpus)]
    return subprocess.run(command, capture_output=True, text=True)


def every_record() -> list[dict]:
    return [record for records in green().values() for record in records]


def _change(records: list[dict], cell_id: str, **fields) -> list[dict]:
    assert any(r["cell_id"] == cell_id for r in records)
    return [r | fields if r["cell_id"] == cell_id else r for r in records]


BF16_SEARCH, FP32_SEARCH = "transformer/bs14/seed0/bf16", "transformer/bs8/seed0/fp32"
FP8_CELL = "mlp/bs8192/seed0/fp8-tensorwise/compile-default"
COMPILED_LM = "transformer/bs16/seed0/tf32/compile-reduce-overhead"
AUTOTUNED = "mlp/bs16/seed0/tf32/compile-max-autotune"
CUDA_GRAPHS_BUG = "RuntimeError: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"
BROKEN = {
    "bf16 found what fp32 found": (lambda rs: _change(rs, BF16_SEARCH, **search(8)), "FAIL batch search"),
    "fp32 stopped at samples": (lambda rs: _change(rs, FP32_SEARCH, **search(64, "samples")), "FAIL batch search"),
    "no batch search": (lambda rs: [r for r in rs if "batch_search" not in r], "FAIL batch search"),
    "compiled transformer failed": (
        lambda rs: _change(rs, COMPILED_LM, status="failed", reason=CUDA_GRAPHS_BUG), "FAIL compiled cells"),
    "no tf32 max-autotune cell": (
        lambda rs: [r for r in rs if r["cell_id"] != AUTOTUNED], "FAIL compiled cells ended ok: not run: tf32 + max"),
    "MFU over 1": (lambda rs: _change(rs, "transformer/bs16/seed0/bf16", mfu=1.4), "FAIL MFU present"),
    "MFU missing": (lambda rs: _change(rs, "transformer/bs16/seed0/fp16", mfu=None), "FAIL MFU present"),
    "energy null": (
        lambda rs: _change(rs, "mlp/bs16/seed0/tf32", energy_j=None, throughput=16000.0,
                           gpu_state_note="timed steps took 0.40 s: too short for NVML's energy counter (>= 1 s)"),
        "FAIL energy (NVML) recorded for every ok cell: null in 1 of 25 cells, e.g. mlp/bs16/seed0/tf32 (timed 0.40 s"),
    "a MIG UUID with a GPU- prefix": (
        lambda rs: _change(rs, FP32_SEARCH, environment={"gpu_uuid": "GPU-MIG-5c3d2a1b-0e9f-4a8b-9c7d-6e5f4a3b2c1d"}),
        "FAIL environment.gpu_uuid"),
    "no UUID": (lambda rs: _change(rs, FP32_SEARCH, environment={"gpu_uuid": None}), "FAIL environment.gpu_uuid"),
    "an evaluation inside the timed steps": (
        lambda rs: _change(rs, "transformer/bs16/seed0/bf16", **evaluated(timed_s=2.4)),
        "FAIL time to target: evaluations outside the timed steps: transformer/bs16/seed0/bf16: timed 1.970 s"),
    "no evaluation": (lambda rs: [r | {"eval_every": None} for r in rs], "FAIL time to target"),
    "the matrix stage's cells ran alone": (
        lambda rs: [r | {"side_by_side_id": None, "ran_alone": "did not fit"} if r["matrix"] == "gpu-check" else r
                    for r in rs],
        "FAIL side by side: each comparison's cells took turns on the GPU: 4 of 4 cells alone"),
    "fp8 fell back to bf16 matmuls": (
        lambda rs: _change(rs, FP8_CELL, matmul_dtype="bfloat16", fp8_layers=0, dtype_audit={"ops": []}),
        f"FAIL fp8 ran float8 matmuls (speed vs bf16): {FP8_CELL}: matmul dtype bfloat16, 0 scaled matmuls"),
    "fp8 cell failed": (
        lambda rs: _change(rs, FP8_CELL, status="failed", reason="RuntimeError: torch._scaled_mm is only supported"),
        f"FAIL fp8 ran float8 matmuls (speed vs bf16): {FP8_CELL} failed: RuntimeError"),
    "no fp8 cell": (lambda rs: [r for r in rs if r["cell_id"] != FP8_CELL], "FAIL fp8 ran float8 matmuls"),
    "no GPU work traced": (
        lambda rs: _change(rs, FP32_SEARCH, gpu_busy_ms_per_step=None, gpu_idle_fraction=None),
        "FAIL GPU work traced (busy time, idle share): 18 of 19 cells"),
}  # fmt: skip


def test_every_check_passes_on_good_records(tmp_path):
    done = checks(tmp_path, every_record(), gpus=2)
    assert done.returncode == 0, done.stdout
    verdicts = [line.split()[0] for line in done.stdout.splitlines()[1:-1]]
    assert verdicts == ["PASS"] * 11, done.stdout
    assert done.stdout.splitlines()[0] == "machine: NVIDIA H200 (cc 9.0, driver 580.1, torch 2.14.1, CUDA 13.0)"


@pytest.mark.parametrize("case", BROKEN)
def test_each_broken_fact_fails_its_check_and_the_exit(tmp_path, case):
    breaks, expected = BROKEN[case]
    done = checks(tmp_path, breaks(every_record()))
    assert done.returncode == 1 and expected in done.stdout, done.stdout
    assert sum(line.startswith("FAIL") for line in done.stdout.splitlines()) == 1, done.stdout  # that one only


def test_a_window_set_aside_still_counts_among_the_steps_the_evaluations_fall_between(tmp_path):
    """Throughput counts the windows kept (a hiccup's is set aside, issue 50; a warming one, 53), so
    the timed steps' spans are each window's timed samples over its own rate, not all the samples
    over the throughput. The CPU rehearsal of 2026-12-07 failed this check on a transformer cell with
    a window set aside: "timed 1.504 s but the last evaluation at 1.463 s", the windows' own sum."""
    rates = [3200.0] * 5 + [1600.0]  # the last window at half speed: set aside, out of the throughput
    timed_steps = (66, 65, 66, 66, 65, 66)  # window_edges(400): 67, 66, 67, 67, 66, 67 steps, each turn's first untimed
    spans = sum(steps * 16 / rate for steps, rate in zip(timed_steps, rates, strict=True))
    hiccup = {"throughput_windows": rates, **evaluated(spans)}
    done = checks(tmp_path, _change(every_record(), "transformer/bs16/seed0/bf16", **hiccup))
    assert done.returncode == 0 and "PASS time to target" in done.stdout, done.stdout


def test_a_gpu_without_bf16_has_no_batch_search_to_judge(tmp_path):
    skipped = _change(every_record(), BF16_SEARCH, status="skipped", reason="bf16 needs compute capability >= 8.0")
    done = checks(tmp_path, skipped)
    assert "n/a  batch search: bf16 fits a larger batch than fp32: transformer/bs14/seed0/bf16 skipped" in done.stdout
    assert done.returncode == 0, done.stdout


def test_a_gpu_without_fp8_says_why_and_passes(tmp_path):
    """An A100 (compute capability 8.0) skips the fp8 cell with its reason: not a failure, not a pass."""
    reason = "fp8 training (tensorwise) needs an NVIDIA GPU of compute capability >= 8.9; this one has 8.0"
    done = checks(tmp_path, _change(every_record(), FP8_CELL, status="skipped", reason=reason))
    assert f"n/a  fp8 ran float8 matmuls (speed vs bf16): {FP8_CELL} skipped: {reason}" in done.stdout
    assert done.returncode == 0, done.stdout


def test_a_uuid_nvidia_smi_does_not_list_fails(tmp_path):
    done = checks(tmp_path, every_record(), listed="GPU-00000000-0000-0000-0000-000000000000")
    assert done.returncode == 1 and f"FAIL environment.gpu_uuid is the GPU's UUID: {UUID} not in" in done.stdout


def test_ddp_mfu_over_one_fails_on_two_gpus_and_is_not_judged_on_one(tmp_path):
    inflated = _change(every_record(), "resnet-ddp/bs16/seed0/bf16", mfu=1.8)
    assert "FAIL MFU <= 1 for DDP cells" in checks(tmp_path / "two", inflated, gpus=2).stdout
    assert "n/a  MFU <= 1 for DDP cells on 2+ GPUs: this machine has 1 GPU" in checks(tmp_path / "one", inflated).stdout


def test_an_unknown_peak_is_not_judged_and_a_failed_stage_fails_the_verdict(tmp_path):
    unknown = [r | {"peak_tflops": None, "mfu": None} for r in every_record()]
    done = checks(tmp_path, unknown, stages="probe\t0\t1\t60\ncompile\t124\t240\t240\n")
    assert "n/a  MFU present and <= 1 (cells with a known peak): none of 24 ok cells" in done.stdout
    assert done.returncode == 1 and done.stdout.splitlines()[-1] == "gpu-check: FAIL: compile exit 124"


def test_a_stage_refused_before_any_cell_ran_shows_its_error(tmp_path):
    """A matrix the validator refuses exits 2 with one line and records nothing: the stage's block
    quotes that line (it said "0 cells:" and nothing more)."""
    (tmp_path / "run").mkdir()
    error = "amp-suite: error: gpu-check-fp8.yaml: workloads.0.num_classes: Input should be greater than or equal to 2"
    (tmp_path / "fp8.txt").write_text(f"{error}\n")
    command = [sys.executable, str(SUMMARY), "stage", str(tmp_path), "fp8", "--exit", "2", "--wall-s", "1",
               "--budget-s", "150", "--matrix", "gpu-check-fp8"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"[fp8] exit 2, 1 s of 150 s: gpu-check-fp8: no cells recorded: {error[:140]}"


# -- the matrices the stages run -------------------------------------------------------------


def test_the_gpu_check_matrices_hold_what_the_checks_judge():
    """Every precision eager on a matmul-heavy workload, every workload somewhere, the compiled
    cells the summary expects (one precision: one compile per model and mode), and a batch
    search of fp32 against bf16; the script runs each on CUDA."""
    import importlib.util

    from amp_suite.config import PRECISIONS, load_matrix
    from amp_suite.config.workloads import REFERENCE_WORKLOADS

    matrices = {name: load_matrix(REPO / "experiments" / f"{name}.yaml") for name in
                ("gpu-check", "gpu-check-batch", "gpu-check-fp8", "gpu-check-compile", "gpu-check-multi")}  # fmt: skip
    eager = matrices["gpu-check"]
    assert tuple(eager.precisions) == PRECISIONS[:4]
    assert {w.workload for w in eager.workloads} == {"transformer", "bert"}
    assert {w.workload for m in matrices.values() for w in m.workloads} == set(REFERENCE_WORKLOADS)
    spec = importlib.util.spec_from_file_location("gpu_check_summary", SUMMARY)
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    compiled = [
        {"precision": c.precision, "compile": c.compile, "config": {"workload": {"workload": c.workload.workload}}}
        for c in matrices["gpu-check-compile"].cells("cuda")
    ]
    assert matrices["gpu-check-compile"].precisions == ["tf32"]
    assert all(any(matches(c) for c in compiled) for _, matches in summary.EXPECTED_COMPILED)
    fp8 = [c for c in matrices["gpu-check-fp8"].cells("cuda") if c.precision.startswith("fp8") and c.compile != "off"]
    assert len(fp8) == 1 and fp8[0].precision == "fp8-tensorwise"  # one fp8 cell, compiled, beside bf16
    assert matrices["gpu-check-fp8"].precisions == ["bf16", "fp8-tensorwise"]
    batch = matrices["gpu-check-batch"]
    assert batch.precisions == ["fp32", "bf16"] and [w.batch_sizes for w in batch.workloads] == [["auto"]]
    script = (REPO / "scripts" / "gpu-check.sh").read_text()
    assert all(f"experiments/{name}.yaml" in script for name in matrices) and "--device cuda" in script


def test_the_rehearsal_cuts_each_matrix_to_cpu_size_and_keeps_its_cells(tmp_path):
    """`gpu-check.sh --rehearse` (run by .ci/run) trains what scripts/gpu_check_rehearsal.py makes
    of each matrix: the same name and the same cells (workload, precision, compile mode, layout,
    DDP axes, batch search), at sizes a CPU trains in seconds."""
    from amp_suite.config import load_matrix

    for name in ("gpu-check", "gpu-check-batch", "gpu-check-fp8", "gpu-check-compile", "gpu-check-multi"):
        source = REPO / "experiments" / f"{name}.yaml"
        small = tmp_path / f"{name}.yaml"
        done = subprocess.run([sys.executable, str(REHEARSAL), str(source), str(small)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        full, cut = load_matrix(source), load_matrix(small)
        assert cut.name == full.name and cut.steps < full.steps
        names = [[spec.cell_id.replace(f"/bs{spec.batch_size}/", "/") for spec in m.cells("cuda")] for m in (full, cut)]
        assert names[0] == names[1], name
        for workload in yaml.safe_load(small.read_text())["workloads"]:  # the widths it sets, at CPU size
            assert all(workload[key] <= 64 for key in ("hidden", "n_embd", "d_model", "in_features") if key in workload)
