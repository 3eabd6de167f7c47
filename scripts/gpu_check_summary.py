#!/usr/bin/env python3
"""One screen a person can paste into a report: what scripts/gpu-check.sh found in OUT_DIR.

    python scripts/gpu_check_summary.py OUT_DIR [--tests-exit N] [--run-exit N] [--wall-s S]

Reads OUT_DIR/results.jsonl (the records of truth), OUT_DIR/nvidia-smi.txt and the last line of
OUT_DIR/gpu-tests.txt; prints the machine, the GPU tests' result, the cells by status and one
line per cell with the figures the GPU paths add (TFLOP/s, MFU, energy, throttling, largest batch).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return lines[-1].strip() if lines else "(missing)"


def _number(value: object, form: str) -> str:
    return format(value, form) if isinstance(value, int | float) else "-"


def cell_line(record: dict) -> str:
    figures = [
        f"{_number(record.get('throughput'), ',.0f')}/s",
        f"{_number(record.get('tflops'), '.1f')} TFLOP/s",
        f"MFU {_number(record.get('mfu'), '.0%')}",
        f"{_number(record.get('energy_j_per_sample'), '.3g')} J/sample",
        f"syncs/step {_number(record.get('host_syncs_per_step'), 'g')}",
    ]
    if record.get("throttled"):
        figures.append("THROTTLED " + ",".join(record.get("throttle_reasons") or []))
    search = record.get("batch_search")
    if search:
        figures.append(f"largest batch {search.get('found')}")
    text = f"{record['status']:8} {record['cell_id']:44} " + " | ".join(figures)
    if record["status"] != "ok" and record.get("reason"):
        text += f"\n{'':9}{record['reason'][:140]}"
    return text


def summary(out: Path, tests_exit: int | None, run_exit: int | None, wall_s: float | None) -> str:
    results = out / "results.jsonl"
    lines = results.read_text().splitlines() if results.exists() else []
    records = [json.loads(line) for line in lines if line.strip()]
    statuses = Counter(record["status"] for record in records)
    machine = next((record.get("machine") or {} for record in records if record.get("machine")), {})
    screen = [
        f"gpu-check: {machine.get('device_name', 'no record names the device')}"
        f" (cc {machine.get('compute_capability', '?')}, driver {machine.get('driver', '?')},"
        f" torch {machine.get('torch', '?')}, CUDA {machine.get('cuda', '?')})",
        f"GPU tests: {_last_line(out / 'gpu-tests.txt')}" + (f" (exit {tests_exit})" if tests_exit is not None else ""),
        f"matrix: {len(records)} cells: " + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
        + (f" (exit {run_exit})" if run_exit is not None else "")
        + (f", {wall_s:.0f} s wall" if wall_s is not None else ""),
        *(cell_line(record) for record in records),
    ]
    return "\n".join(screen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tests-exit", type=int)
    parser.add_argument("--run-exit", type=int)
    parser.add_argument("--wall-s", type=float)
    args = parser.parse_args()
    print(summary(args.out, args.tests_exit, args.run_exit, args.wall_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
