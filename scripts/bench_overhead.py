#!/usr/bin/env python3
"""What does the harness cost, on the path users run? The mlp cell through `amp-suite run` (CLI ->
forkserver worker -> cell, with every measurement switched on) against a bare loop written as in
the PyTorch AMP recipe, each in a fresh process: same model, data, batch order, optimizer and step
count, CPU, fp32 and bf16.

Runs are interleaved in pairs (suite then bare, bare then suite, ...) so drift on a shared machine
hits both sides of a pair alike. The overhead is read from the pairs as the suite reads a speedup
from its seeds: the paired ratio of mean throughputs with its 95% interval (amp_suite.summary's
delta-method interval); the median per-pair ratio, which one disturbed pair cannot move, is printed
beside it. On a noisy 2-core VM single runs of the same loop vary by several percent: use many
pairs, and read the interval before the point estimate. Exits 1 when the point estimate is over
--max-overhead; the verdict line says whether the interval settles it.

    python scripts/bench_overhead.py            # about 10 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from amp_suite.summary import paired_ratio, ratio_interval

SMOKE = Path(__file__).resolve().parent.parent / "experiments" / "smoke.yaml"


def bench_matrix(steps: int, warmup: int, folder: Path) -> Path:
    """smoke.yaml's mlp, eager, with the benchmark's step counts."""
    matrix = yaml.safe_load(SMOKE.read_text())
    mlp = next(w for w in matrix["workloads"] if w["workload"] == "mlp")
    mlp["compile"] = [False]
    matrix.update(name="bench-overhead", steps=steps, warmup_steps=warmup, workloads=[mlp])
    path = folder / "bench-overhead.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


def suite_throughput(matrix: Path, precision: str, folder: Path) -> float:
    """One `amp-suite run` of the mlp cell, as a user runs it (embedded MLflow store included)."""
    out = Path(tempfile.mkdtemp(dir=folder))
    command = [sys.executable, "-m", "amp_suite", "run", "--matrix", str(matrix), "--out", str(out),
               "--precisions", precision, "--device", "cpu", "--force"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    if record["status"] != "ok":
        raise SystemExit(f"suite cell did not run ({done.returncode}): {record['reason']}")
    return record["throughput"]


def bare_throughput(matrix: Path, precision: str) -> float:
    command = [sys.executable, __file__, "--bare", precision, "--matrix", str(matrix)]
    return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def bare_loop(matrix_path: Path, precision: str) -> float:
    """The AMP recipe's loop, nothing else, in this (fresh) process."""
    import torch

    from amp_suite.config import load_matrix
    from amp_suite.data import batch_order
    from amp_suite.workloads import build_workload

    spec = load_matrix(matrix_path).select(None, [precision]).cells("cpu", force=True)[0]
    workload = build_workload(spec.workload)
    data = workload.load_data().train
    torch.manual_seed(spec.seed)
    model = workload.build_model(data)
    optimizer = workload.make_optimizer(model)
    order = batch_order(len(data), spec.batch_size, spec.warmup_steps + spec.steps, spec.seed)
    batches = [(data.inputs[i], data.targets[i]) for i in order]
    use_amp = precision == "bf16"
    for step, (inputs, targets) in enumerate(batches):
        if step == spec.warmup_steps:
            start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_amp):
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return spec.batch_size * spec.steps / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=11)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--max-overhead", type=float, default=0.02, help="allowed slowdown, as a fraction")
    parser.add_argument("--bare", help=argparse.SUPPRESS)  # internal: run the bare loop in this process
    parser.add_argument("--matrix", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        print(bare_loop(args.matrix, args.bare))
        return 0

    worst, lowest = 0.0, 1.0
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        matrix = bench_matrix(args.steps, args.warmup, folder)
        print(f"mlp cell, CPU, {args.steps} steps, {args.pairs} interleaved pairs of fresh processes")
        for precision in args.precisions.split(","):
            suite, bare = [], []
            for pair in range(args.pairs):
                for side in ("suite", "bare") if pair % 2 == 0 else ("bare", "suite"):
                    if side == "suite":
                        suite.append(suite_throughput(matrix, precision, folder))
                    else:
                        bare.append(bare_throughput(matrix, precision))
            pairs = dict(enumerate(suite)), dict(enumerate(bare))
            ratio = paired_ratio(*pairs)
            low, high = ratio_interval(*pairs) or (ratio, ratio)
            median = statistics.median(s / b for s, b in zip(suite, bare, strict=True))
            print(
                f"{precision}: amp-suite run {statistics.fmean(suite):,.0f} samples/s | bare"
                f" {statistics.fmean(bare):,.0f} samples/s (means) | suite/bare {ratio:.3f},"
                f" 95% interval {low:.3f}-{high:.3f} | median per-pair ratio {median:.3f}",
                flush=True,
            )
            worst, lowest = max(worst, 1 - ratio), min(lowest, low)
    budget = 1 - args.max_overhead
    settled = "the interval is inside it" if lowest >= budget else "the interval reaches past it: run more pairs"
    verdict = f"within the {args.max_overhead:.0%} budget; {settled}" if worst <= args.max_overhead else "OVER budget"
    print(f"harness overhead: {max(worst, 0.0):.1%} ({verdict})")
    return 0 if worst <= args.max_overhead else 1


if __name__ == "__main__":
    raise SystemExit(main())
