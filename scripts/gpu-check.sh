#!/usr/bin/env bash
# One prepared command for a GPU machine: the GPU-only tests (NVML energy, clocks and throttling,
# MFU, the largest-batch search against real CUDA out-of-memory errors), then a short but complete
# matrix (every workload x every precision, eager and compiled: experiments/gpu-check.yaml),
# everything written to OUT_DIR.
#
#   scripts/gpu-check.sh OUT_DIR
#
# Needs a Python with the suite's dependencies (PYTHON, default: .venv/bin/python, else python3).
# Writes: nvidia-smi.txt, gpu-tests.txt, results.jsonl, summary.txt, mlflow.db, logs/.
set -euo pipefail

out=${1:?usage: scripts/gpu-check.sh OUT_DIR}
cd "$(dirname "$0")/.."
python=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 COLUMNS=160

{ nvidia-smi || echo "nvidia-smi unavailable"; } >"$out/nvidia-smi.txt" 2>&1
"$python" -c 'import torch; assert torch.cuda.is_available(), "PyTorch sees no CUDA device"; print(torch.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))' \
    | tee -a "$out/nvidia-smi.txt"

status=0
"$python" -m pytest -m gpu -q -s -p no:cacheprovider tests 2>&1 | tee "$out/gpu-tests.txt" || status=1

started=$(date +%s)
"$python" -m amp_suite run --matrix experiments/gpu-check.yaml --out "$out" --device cuda 2>&1 | tee "$out/summary.txt" || status=1
echo "gpu-check matrix wall time: $(( $(date +%s) - started )) s" | tee -a "$out/summary.txt"
exit "$status"
