#!/usr/bin/env bash
# One prepared command for a borrowed GPU machine, sized for a short window: about 9 minutes on
# one H200, never more (one deadline for every stage, the multi-GPU one too).
#
#   scripts/gpu-check.sh OUT_DIR
#   scripts/gpu-check.sh --rehearse OUT_DIR   # CI: every stage on this CPU, at tiny sizes (below)
#
# Stages, in order, with what each took on this workplace's H200 (2026-12-04, torch 2.11: a new
# Python process that imports torch and transformers ~7 s there; eager steps host-bound), the
# estimate the deadline is planned on, and the budget that stops it. The estimates add up to 480 s,
# a minute under the deadline (tests/e2e/test_gpu_check_script.py holds them to it); each is the
# stage's measured time scaled to its cut matrix, or, where no lease has run it, the reason given:
#                                                                  measured  estimate budget
#   probe         nvidia-smi, can PyTorch see a GPU, does every module import
#                 (scripts/import_check.py; stops here if not)             31 s      ~30 s   60 s
#   gpu-tests     `pytest -m gpu`: NVML, CUDA timers, doctor, each precision's tiny
#                 cell; not its batch-search test, which batch-search replaces 44 s  ~40 s   90 s
#   float8-bench  experiments/torchao-float8.yaml: torchao's float8 single-linear
#                 benchmark at its two published H100 shapes, bf16, fp8-tensorwise and
#                 fp8-rowwise, compiled, timed by its GPU kernels: six cells of
#                 a ~5 s compile and 22 traced iterations of 1-5 ms         not run   ~60 s  110 s
#   batch-search  experiments/gpu-check-batch.yaml under a 2 GiB allocator cap:
#                 fp32's and bf16's largest batch against real CUDA OOM errors
#                 (12 probes of ~4 s, then two measured cells of 100 steps) 119 s     ~55 s  130 s
#   matrix        experiments/gpu-check.yaml: a small BERT (first: it must finish)
#                 and the transformer eager in fp32, tf32, fp16 and bf16, side by
#                 side, 150 steps                                68 s for the LM's 4 ~75 s  130 s
#   resnet        experiments/gpu-check-resnet.yaml: ResNet-50 in fp32 and bf16, NCHW
#                 and NHWC, side by side (cuDNN's tuning in the warmup)     not run   ~45 s   80 s
#   fp8           experiments/gpu-check-fp8.yaml: fp8 (tensor-wise) against bf16 on
#                 a linear stack at hidden 4,096, compiled (compiles 6 + 17 s);
#                 the t5 workload eager (300 steps: NVML's energy needs 1 s) 82 s     ~55 s  100 s
#   compile       experiments/gpu-check-compile.yaml, tf32: MLP reduce-overhead and
#                 max-autotune, small transformer reduce-overhead
#                 (compiles 4.5 + 49 + 11.5 s; 2000 steps, 3.4-6 s a cell)  173 s     ~90 s  160 s
#   multi-gpu     2+ GPUs only: experiments/gpu-check-multi.yaml, --gpus all not run ~90 s  180 s
#   overhead      scripts/bench_overhead.py --device cuda: the mlp cell through
#                 `amp-suite run` against the bare AMP loop, fp32 and bf16, one pair
#                 of 1,000 steps a side (at the 1.9 ms step the lease measured,
#                 1.9 s timed a side, four processes of ~7 s)               not run   ~30 s  150 s
# The measured column is the first lease's, before the matrices were cut to fit (steps: batch
# 500 -> 100, matrix 400 -> 150, fp8 400 -> 300, compile 8000 -> 2000, the eager MLP left to the
# overhead stage): that run reached the compile stage at 400 s and the overhead stage never
# started. Every stage shares one deadline, 540 s after the start: a stage that would run past it
# gets only what is left, and one that would get under 5 s does not start, so the script ends
# within 9 minutes whatever the estimates miss (the multi-GPU stage adds ~90 s on 2+ GPUs, where
# the overhead stage gets what is left).
# Every timed region lasts over 1 s (NVML's energy counter needs it): see each matrix's comment.
#
# After every stage it appends that stage's block to OUT_DIR/gpu-check.txt (name, exit code, wall
# time, its cells' figures) and refreshes OUT_DIR/results.jsonl and OUT_DIR/bundle.tar.gz, so a
# run stopped at any point leaves what it did. At the end it appends the PASS/FAIL checks of the
# GPU-only facts issue 19's fixes promise (scripts/gpu_check_summary.py). OUT_DIR gets 3 files:
#   gpu-check.txt    the screen to paste into a report (also printed)
#   results.jsonl    every cell's record (all matrices, the multi-GPU one too)
#   bundle.tar.gz    everything else: nvidia-smi.txt, each stage's output (<stage>.txt),
#                    stages.tsv, run/ (results.jsonl, invocations.jsonl, mlflow.db, logs/, report/)
# Exits 0 only when every stage exited 0 and every check passed. Stopped by SIGINT, SIGTERM or
# SIGHUP, it stops the stage, appends the checks of what it has, and exits 128 + the signal.
#
# --rehearse runs every stage's code path on the CPU before a GPU lease does, so that a stage that
# would crash on a path, a missing file, a config or a record the summary can't read crashes in CI:
# each matrix cut to CPU size by scripts/gpu_check_rehearsal.py (same name, workloads, modes, compile
# modes, DDP axes), every mode forced, the batch search against a stand-in device of 16 MB that
# raises CUDA's out-of-memory error (scripts/simulated_memory), the matrix stage's cells tracing their
# "GPU" work behind a stand-in stream of 100 us launches (scripts/simulated_stream: the trace, the
# bound and the summary's figures, as on CUDA), `pytest -m gpu` collected (its tests skip),
# the multi-GPU matrix without --gpus (DDP on gloo; --gpus needs CUDA), and the overhead benchmark
# one short pair with its sides one after the other, as on CUDA, its speed not judged. The checks
# are GPU facts: printed, not judged. Exits 0 when every stage exited 0. About 8 minutes on 2 cores
# (418-534 s on AMD EPYCs without native bf16, 2026-12-07), under budgets twice a lease's (below).
#
# Environment: PYTHON (default: .venv/bin/python, else python3) must hold the suite and its
# dependencies. GPU_CHECK_TIMEOUT_<STAGE> (seconds; e.g. GPU_CHECK_TIMEOUT_COMPILE, with - as _)
# changes a stage's budget, GPU_CHECK_TIMEOUT_TOTAL the deadline of every stage (540 s).
set -uo pipefail  # no -e: a failed stage is recorded, and the next one still runs

rehearse=0
if [ "${1:-}" = --rehearse ]; then rehearse=1 && shift; fi
out=${1:?usage: scripts/gpu-check.sh [--rehearse] OUT_DIR}
out=$(realpath -m -- "$out")  # before the cd below: a relative OUT_DIR means the caller's directory
cd "$(dirname "$0")/.." || exit 2
python=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
mkdir -p "$out" || exit 2
# The stages write outside OUT_DIR: if the machine is taken back mid-stage, OUT_DIR still holds
# only the summary, the records and the bundle of the stages that finished.
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
summary=$out/gpu-check.txt
rm -f "$summary" "$out"/{results.jsonl,bundle.tar.gz,.results.partial,.bundle.partial}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 COLUMNS=160
BUNDLE_MAX_BYTES=$((15 * 1024 * 1024))  # a file that comes back from a borrowed machine: 16 MiB at most
MEMORY_CAP_MB=2048  # the batch-search stage's allocator cap (experiments/gpu-check-batch.yaml)

started=$(date +%s)
# A rehearsal proves the stages' code paths, not their times, and a CPU's times wander: on the same
# kind of AMD EPYC (no native bf16: every bf16 cell emulated) one stage took 60 s and then 94 s, the
# multi-GPU one 137-157 s, the whole 468-534 s. So that a busy CI machine does not fail it, its
# budgets are twice a lease's and its deadline 900 s; a lease's deadline is 540 s.
total_s=$([ "$rehearse" = 1 ] && echo 900 || echo 540)
budget_scale=$([ "$rehearse" = 1 ] && echo 2 || echo 1)
deadline=$((started + ${GPU_CHECK_TIMEOUT_TOTAL:-$total_s}))

say() { echo "$1" | tee -a "$summary"; }

collect() {  # the records and the bundle, as they stand now (written aside, then moved: never half a file)
    if [ -f "$work/run/results.jsonl" ]; then
        cp "$work/run/results.jsonl" "$out/.results.partial" && mv "$out/.results.partial" "$out/results.jsonl"
    fi
    tar -czf "$out/.bundle.partial" -C "$work" . 2>/dev/null
    if [ "$(stat -c %s "$out/.bundle.partial" 2>/dev/null || echo 0)" -gt "$BUNDLE_MAX_BYTES" ]; then
        # results.jsonl is the record of truth; `amp-suite sync` rebuilds an MLflow store from it.
        tar -czf "$out/.bundle.partial" -C "$work" --exclude=./run/mlflow.db --exclude=./run/mlartifacts . 2>/dev/null
        grep -q "bundle over" "$summary" 2>/dev/null || say "(bundle over 15 MiB: mlflow.db and mlartifacts left out)"
    fi
    mv "$out/.bundle.partial" "$out/bundle.tar.gz"
}

stage() {  # stage NAME ESTIMATE_S BUDGET_S MATRIX|- COMMAND...: run it under its budget, then append its block
    local name=$1 estimate=$2 budget=$3 matrix=$4
    shift 4
    local override="GPU_CHECK_TIMEOUT_${name^^}"
    override=${override//-/_}
    budget=${!override:-$((budget * budget_scale))}
    local left=$((deadline - $(date +%s)))
    if [ "$left" -lt "$budget" ]; then budget=$left; fi
    if [ "$left" -lt 5 ]; then
        printf '%s\t%s\t%s\t%s\t%s\n' "$name" 124 0 0 "$estimate" >>"$work/stages.tsv"
        say "[$name] not run: the deadline (GPU_CHECK_TIMEOUT_TOTAL) has passed (estimate ~$estimate s)"
        return 124
    fi
    local begin code wall block
    begin=$(date +%s)
    current=$name
    # timeout(1) runs the stage in a process group of its own and stops all of it, the cells and the
    # forkserver too: SIGTERM first (amp-suite closes its runs and keeps every finished record). In
    # the background, so that a signal to this script reaches on_signal at once; tail shows its output.
    timeout --kill-after=15 "$budget" bash -c '"$@"' "$name" "$@" >"$work/$name.txt" 2>&1 </dev/null &
    running=$!
    tail -n +1 -s 0.2 -f --pid="$running" "$work/$name.txt" &
    follower=$!
    wait "$running"
    code=$?
    wait "$follower"
    running="" follower=""
    wall=$(($(date +%s) - begin))
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$code" "$wall" "$budget" "$estimate" >>"$work/stages.tsv"
    local figures=(--exit "$code" --wall-s "$wall" --budget-s "$budget" --estimate-s "$estimate")
    if [ "$matrix" != - ]; then figures+=(--matrix "$matrix"); fi
    block=$("$python" scripts/gpu_check_summary.py stage "$work" "$name" "${figures[@]}") ||
        block="[$name] exit $code, $wall s of $budget s (the summary script failed: see $name.txt in the bundle)"
    echo
    say "$block"
    collect
    return "$code"
}

running="" follower="" current=""  # the stage in progress: its timeout(1) and tail, for on_signal
on_signal() {  # stopped from outside (Ctrl-C, a scheduler's SIGTERM): stop the stage, keep what was done
    trap - INT TERM HUP
    if [ -n "$running" ]; then kill -TERM "$running" 2>/dev/null && wait "$running"; fi
    if [ -n "$follower" ]; then kill "$follower" 2>/dev/null; fi
    say "$("$python" scripts/gpu_check_summary.py checks "$work" --gpus "${gpus:-1}")"  # what the records show so far
    say "gpu-check: stopped by SIG$1${current:+ during the $current stage}; the blocks above are the stages that ended"
    collect
    exit $((128 + $2))
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP

probe() {
    # Every module imports, and the versions to be measured are on record: seconds, where a missing
    # package (a box's own Python, scripts/offline_wheels.py's wheels) would fail a stage minutes in.
    if [ "$rehearse" = 0 ]; then  # first: the bundle says what the machine has, whatever fails next
        { nvidia-smi && nvidia-smi -L; } >"$work/nvidia-smi.txt" 2>&1 || echo "nvidia-smi unavailable" >>"$work/nvidia-smi.txt"
    fi
    "$python" scripts/import_check.py || return 1
    if [ "$rehearse" = 1 ]; then
        "$python" -c 'import torch; print("gpus 0"); print(f"rehearsal on the CPU: torch {torch.__version__}")'
        return
    fi
    "$python" -c 'import torch
assert torch.cuda.is_available(), "PyTorch sees no CUDA device"
print("gpus", torch.cuda.device_count())
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, cc {torch.cuda.get_device_capability(0)}")'
}

amp_suite() {  # one matrix into the shared run folder (records append; the lock keeps runs apart)
    if [ "$rehearse" = 0 ]; then
        "$python" -m amp_suite run --matrix "$1" --out "$work/run" --device cuda "${@:2}"
        return
    fi
    # Cut to CPU size under the same name (the summary finds its records by it), every mode forced:
    # the CPU is slow at fp16 and fp8, not unable.
    local small
    small="$work/matrices/$(basename "$1")"
    mkdir -p "$work/matrices" && "$python" scripts/gpu_check_rehearsal.py "$1" "$small" || return 2
    "$python" -m amp_suite run --matrix "$small" --out "$work/run" --device cpu --force "${@:2}"
}

streamed() {  # a command whose cells trace their GPU's work; rehearsed, behind a stand-in stream
    if [ "$rehearse" = 1 ]; then  # a CPU has no kernel timeline: scripts/simulated_stream plays one
        PYTHONPATH="$PWD/scripts/simulated_stream${PYTHONPATH:+:$PYTHONPATH}" SIMULATED_LAUNCH_US=100 "$@"
        return
    fi
    "$@"
}

capped() {  # a command whose CUDA allocators are capped, through a sitecustomize on PYTHONPATH
    if [ "$rehearse" = 1 ]; then  # a CPU has no allocator to cap: a stand-in device of 16 MB raises CUDA's OOM
        PYTHONPATH="$PWD/scripts/simulated_memory${PYTHONPATH:+:$PYTHONPATH}" DEVICE_BYTES=16000000 "$@"
        return
    fi
    mkdir -p "$work/hooks"
    cat >"$work/hooks/sitecustomize.py" <<'PY'
"""gpu-check's batch-search stage: every process's CUDA allocator capped, so the search meets a real
CUDA out-of-memory error at a small batch. Queued for when CUDA starts: in a cell, after its fork
from the forkserver (which never starts CUDA). It hides any other sitecustomize for this stage."""
import os
import sys

try:
    import torch

    cap = int(os.environ["GPU_CHECK_MEMORY_CAP_MB"]) * 2**20

    def _cap():
        for index in range(torch.cuda.device_count()):
            total = torch.cuda.get_device_properties(index).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), index)

    torch.cuda._lazy_call(_cap)
except Exception as exc:  # no cap: the searches stop at `samples` and the summary's check says so
    print(f"gpu-check: allocator cap not set: {type(exc).__name__}: {exc}", file=sys.stderr)
PY
    PYTHONPATH="$work/hooks${PYTHONPATH:+:$PYTHONPATH}" GPU_CHECK_MEMORY_CAP_MB=$MEMORY_CAP_MB "$@"
}

# The stages run under timeout(1), in a bash of their own: it needs these.
export python work MEMORY_CAP_MB rehearse
export -f probe amp_suite capped streamed

failed=0
echo "gpu-check$([ "$rehearse" = 1 ] && echo " --rehearse") $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), into $out" |
    tee "$summary"
if ! stage probe 30 60 - probe; then
    say "gpu-check: FAIL: no usable GPU, or a module that does not import (see probe.txt and nvidia-smi.txt in the bundle); nothing else was run"
    exit 1
fi
gpus=$(awk '$1 == "gpus" {print $2}' "$work/probe.txt")
gpus=${gpus:-1}

# What only a GPU proves first (the compiles among it); the overhead benchmark, whose pairs report as
# they end, last: where the deadline bites, it bites there.
stage gpu-tests 40 90 - "$python" -m pytest -m gpu -k "not largest_batch" -q -s -p no:cacheprovider tests || failed=1
# The published figure this lease is for: torchao's float8 benchmark, early, where no deadline reaches it.
stage float8-bench 60 110 torchao-float8 amp_suite experiments/torchao-float8.yaml || failed=1
stage batch-search 55 130 gpu-check-batch capped amp_suite experiments/gpu-check-batch.yaml || failed=1
stage matrix 75 130 gpu-check streamed amp_suite experiments/gpu-check.yaml || failed=1
stage resnet 45 80 gpu-check-resnet amp_suite experiments/gpu-check-resnet.yaml || failed=1
stage fp8 55 100 gpu-check-fp8 amp_suite experiments/gpu-check-fp8.yaml || failed=1
stage compile 90 160 gpu-check-compile amp_suite experiments/gpu-check-compile.yaml || failed=1
if [ "$rehearse" = 1 ]; then  # --gpus places cells on CUDA devices: a rehearsal runs DDP on gloo
    stage multi-gpu 90 180 gpu-check-multi amp_suite experiments/gpu-check-multi.yaml || failed=1
elif [ "$gpus" -ge 2 ]; then
    stage multi-gpu 90 180 gpu-check-multi amp_suite experiments/gpu-check-multi.yaml --gpus all || failed=1
else
    say "[multi-gpu] multi-GPU and DDP: not run, this machine has $gpus GPU (they need 2 or more)"
fi
# The harness's own cost on the launch-bound MLP, every mode (exit 1: over the 2% budget). A script,
# not a module: PYTHONPATH gives it, and the sides it starts, this checkout's amp_suite.
overhead=(--device cuda --pairs 1 --steps 1000 --precisions fp32,bf16)
# Rehearsed: one short pair, its sides one after the other as on CUDA; a CPU's speed is not judged.
if [ "$rehearse" = 1 ]; then overhead=(--device cpu --sequential --pairs 1 --steps 40 --warmup 5 --max-overhead 1); fi
stage overhead 30 150 - env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$python" scripts/bench_overhead.py \
    "${overhead[@]}" || failed=1

echo
judged=()
if [ "$rehearse" = 1 ]; then judged=(--rehearsal); fi
checks=$("$python" scripts/gpu_check_summary.py checks "$work" --gpus "$gpus" "${judged[@]}") || failed=1
say "${checks:-gpu-check: FAIL: the summary script failed}"
say "total: $(($(date +%s) - started)) s"
collect
exit "$failed"
