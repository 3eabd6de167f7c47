#!/usr/bin/env python3
"""What does the harness cost? The suite's mlp cell against a bare loop written as in the
PyTorch AMP recipe: same model, data, batch order, optimizer and step count, CPU, fp32 and bf16.

Runs are interleaved in pairs (suite then bare, bare then suite, ...) so drift on a shared
machine hits both sides of a pair alike; the overhead is the median of the per-pair throughput
ratios (a paired comparison, far steadier on a noisy 2-core VM than a ratio of medians).
Exits 1 when the suite is slower than the bare loop by more than --max-overhead.

    python scripts/bench_overhead.py            # about 2 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from amp_suite.cell import run_cell
from amp_suite.config import CellSpec, load_matrix
from amp_suite.data import batch_order
from amp_suite.workloads import build_workload

SMOKE = Path(__file__).resolve().parent.parent / "experiments" / "smoke.yaml"


def mlp_spec(precision: str, steps: int, warmup: int) -> CellSpec:
    matrix = load_matrix(SMOKE).select(["mlp"], [precision])
    spec = matrix.cells("cpu", force=True)[0]
    return spec.model_copy(update={"steps": steps, "warmup_steps": warmup})


def suite_throughput(spec: CellSpec) -> float:
    record = run_cell(spec)
    if record.status != "ok":
        raise SystemExit(f"suite cell {spec.cell_id} did not run: {record.reason}")
    return record.throughput


def bare_throughput(spec: CellSpec) -> float:
    """The AMP recipe's loop, nothing else."""
    workload = build_workload(spec.workload)
    data = workload.load_data().train
    torch.manual_seed(spec.seed)
    model = workload.build_model(data)
    optimizer = workload.make_optimizer(model)
    order = batch_order(len(data), spec.batch_size, spec.warmup_steps + spec.steps, spec.seed)
    batches = [(data.inputs[i], data.targets[i]) for i in order]
    use_amp = spec.precision == "bf16"

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
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--steps", type=int, default=1000)  # long runs average out VM noise
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--max-overhead", type=float, default=0.05, help="allowed slowdown, as a fraction")
    args = parser.parse_args()

    worst = 0.0
    print(f"mlp cell, CPU ({torch.get_num_threads()} threads), {args.steps} steps, {args.repeats} interleaved repeats")
    for precision in ("fp32", "bf16"):
        spec = mlp_spec(precision, args.steps, args.warmup)
        suite, bare = [], []
        for repeat in range(args.repeats):
            pair = [("suite", suite_throughput, suite), ("bare", bare_throughput, bare)]
            for _, measure, into in pair if repeat % 2 == 0 else reversed(pair):
                into.append(measure(spec))
        ratios = sorted(s / b for s, b in zip(suite, bare, strict=True))
        ratio = statistics.median(ratios)
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratio, ratio, ratio]
        worst = max(worst, 1 - ratio)
        print(
            f"{precision}: suite {statistics.median(suite):,.0f} samples/s | bare {statistics.median(bare):,.0f}"
            f" samples/s (medians) | suite/bare per pair: median {ratio:.3f},"
            f" quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}"
        )
    verdict = "within" if worst <= args.max_overhead else "OVER"
    print(f"harness overhead: {max(worst, 0.0):.1%} ({verdict} the {args.max_overhead:.0%} budget)")
    return 0 if worst <= args.max_overhead else 1


if __name__ == "__main__":
    raise SystemExit(main())
