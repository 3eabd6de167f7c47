#!/usr/bin/env bash
# One prepared command for a GPU machine: the GPU-only tests (NVML energy, clocks and throttling,
# MFU, the largest-batch search against real CUDA out-of-memory errors), then a short but complete
# matrix (every workload x every precision, eager and compiled: experiments/gpu-check.yaml), and,
# on a machine with 2 or more GPUs, the multi-GPU scheduler and DDP over NCCL
# (experiments/gpu-check-multi.yaml with --gpus all, into OUT_DIR/multi-gpu); everything written
# to OUT_DIR, and one screen of results to paste into a report (which says when there was one GPU).
#
#   scripts/gpu-check.sh OUT_DIR
#
# Needs a Python with the suite's dependencies (PYTHON, default: .venv/bin/python, else python3).
# Writes: nvidia-smi.txt, gpu-tests.txt, results.jsonl, run.txt, mlflow.db, logs/, gpu-check.txt,
# and with 2+ GPUs multi-gpu/ (its own results.jsonl, run.txt, logs).
# Exits non-zero when a GPU test fails or the matrix does not end as expected (a failed cell is
# exit 3 from `amp-suite run`).
set -euo pipefail

out=${1:?usage: scripts/gpu-check.sh OUT_DIR}
out=$(realpath -m -- "$out")  # before the cd below: a relative OUT_DIR means the caller's directory
cd "$(dirname "$0")/.."
python=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 COLUMNS=160

{ nvidia-smi || echo "nvidia-smi unavailable"; } >"$out/nvidia-smi.txt" 2>&1
"$python" -c 'import torch; assert torch.cuda.is_available(), "PyTorch sees no CUDA device"; print(torch.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))' \
    | tee -a "$out/nvidia-smi.txt"

tests_exit=0
"$python" -m pytest -m gpu -q -s -p no:cacheprovider tests 2>&1 | tee "$out/gpu-tests.txt" || tests_exit=$?

started=$(date +%s)
run_exit=0
"$python" -m amp_suite run --matrix experiments/gpu-check.yaml --out "$out" --device cuda 2>&1 | tee "$out/run.txt" || run_exit=$?
wall=$(( $(date +%s) - started ))

gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())')
multi_exit=0
if [ "$gpus" -ge 2 ]; then
    mkdir -p "$out/multi-gpu"
    "$python" -m amp_suite run --matrix experiments/gpu-check-multi.yaml --out "$out/multi-gpu" --device cuda \
        --gpus all 2>&1 | tee "$out/multi-gpu/run.txt" || multi_exit=$?
fi

echo
"$python" scripts/gpu_check_summary.py "$out" --tests-exit "$tests_exit" --run-exit "$run_exit" --wall-s "$wall" \
    --gpus "$gpus" --multi-exit "$multi_exit" | tee "$out/gpu-check.txt"
[ "$tests_exit" -eq 0 ] && [ "$run_exit" -eq 0 ] && [ "$multi_exit" -eq 0 ]
