#!/usr/bin/env python3
"""A gpu-check matrix cut to CPU size, for `scripts/gpu-check.sh --rehearse`: the same name,
workloads, precisions, compile modes, DDP axes, data sources and batch search, at sizes a 2-core CPU
trains in seconds. A rehearsal runs every stage's code path end to end before a GPU lease does, so
that a stage that would crash on a path, a missing file, a config the validator refuses or a record
the summary can't read crashes in CI instead.

    python scripts/gpu_check_rehearsal.py experiments/gpu-check.yaml OUT.yaml

What it can't rehearse is what only the GPU has: CUDA's kernels and their shape rules (the fp8 one
has a test of its own, tests/unit/cell/test_precision_fp8.py), NVML, the allocator's real out-of-memory errors and the
placement of cells on GPUs (`--gpus`; tests/unit/execution/test_scheduler.py covers it with stand-in GPUs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

STEPS = 12  # six windows of two steps: side by side, each turn's first step is trained but not timed
WARMUP_STEPS = 4  # two of them kept back for the warm round of turns
EVAL_EVERY = 4  # time to target evaluates twice inside the timed steps
# A workload's sizes at most (widths stay multiples of 16, so fp8's layers still convert).
CEILINGS = {
    "samples": 64,
    "in_features": 64,
    "hidden": 64,
    "n_embd": 64,
    "d_model": 64,
    "d_ff": 128,
    "n_layer": 2,
    "depth": 2,
    "seq_len": 32,
    "source_len": 32,
    "target_len": 32,
    "vocab_size": 512,
    "image_size": 32,  # ResNet's smallest input
    "out_features": 64,  # torchao's float8 benchmark's N (its K is in_features)
}
BATCH_CEILING = 8
# ResNet-50's bottleneck blocks as ResNet-18's basic ones: the same torchvision path (cuDNN's on a GPU,
# channels_last, SGD) at a fifth of the work; a CPU without native bf16 emulates every bf16 convolution.
REHEARSED_ARCH = "resnet18"
VAL_SAMPLES = 16


def shrunk_workload(workload: dict) -> dict:
    smaller = {key: min(value, CEILINGS[key]) if key in CEILINGS else value for key, value in workload.items()}
    if str(workload.get("arch", "")).startswith("resnet"):
        smaller["arch"] = REHEARSED_ARCH
    if "batch_sizes" in workload:
        smaller["batch_sizes"] = [b if b == "auto" else min(b, BATCH_CEILING) for b in workload["batch_sizes"]]
    if "data" in workload:
        smaller["data"] = {**workload["data"], "val_samples": VAL_SAMPLES}
    if "target" in workload:
        smaller["target"] = {**workload["target"], "eval_every": EVAL_EVERY}
    return smaller


def shrunk(matrix: dict) -> dict:
    """The matrix at CPU size: every workload under the ceilings, a dozen timed steps a cell."""
    workloads = [shrunk_workload(workload) for workload in matrix["workloads"]]
    return {**matrix, "steps": STEPS, "warmup_steps": WARMUP_STEPS, "workloads": workloads}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: gpu_check_rehearsal.py MATRIX.yaml OUT.yaml", file=sys.stderr)
        return 2
    source, target = map(Path, argv)
    target.write_text(yaml.safe_dump(shrunk(yaml.safe_load(source.read_text())), sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
