#!/usr/bin/env python3
"""One screen a person can paste into a report: what scripts/gpu-check.sh found in OUT_DIR.

    python scripts/gpu_check_summary.py OUT_DIR [--tests-exit N] [--run-exit N] [--wall-s S]
                                        [--gpus N] [--multi-exit N]

Reads OUT_DIR/results.jsonl (the records of truth), OUT_DIR/nvidia-smi.txt and the last line of
OUT_DIR/gpu-tests.txt; prints the machine, the GPU tests' result, the cells by status and one
line per cell with the figures the GPU paths add (TFLOP/s, MFU, energy, throttling, largest batch).
Then the multi-GPU part (OUT_DIR/multi-gpu/results.jsonl): its cells with the GPU each ran on and
the DDP figures, or why it did not run (one GPU).
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
    if record.get("comm_share") is not None:
        figures.append(f"comm {record['comm_share']:.0%} of a step")
    visible = (record.get("environment") or {}).get("cuda_visible_devices")
    if visible:
        figures.append(f"on GPU {visible}")
    text = f"{record['status']:8} {record['cell_id']:44} " + " | ".join(figures)
    if record["status"] != "ok" and record.get("reason"):
        text += f"\n{'':9}{record['reason'][:140]}"
    return text


def _records(folder: Path) -> list[dict]:
    results = folder / "results.jsonl"
    lines = results.read_text().splitlines() if results.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def _by_status(records: list[dict]) -> str:
    statuses = Counter(record["status"] for record in records)
    return f"{len(records)} cells: " + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))


def multi_gpu(out: Path, gpus: int | None, multi_exit: int | None) -> list[str]:
    if gpus is None:
        return []
    if gpus < 2:
        return [f"multi-GPU and DDP: not run, this machine has {gpus} GPU (they need 2 or more)"]
    records = _records(out / "multi-gpu")
    exit_note = f" (exit {multi_exit})" if multi_exit is not None else ""
    return [f"multi-GPU and DDP on {gpus} GPUs: {_by_status(records)}{exit_note}", *map(cell_line, records)]


def summary(
    out: Path,
    tests_exit: int | None,
    run_exit: int | None,
    wall_s: float | None,
    gpus: int | None = None,
    multi_exit: int | None = None,
) -> str:
    records = _records(out)
    machine = next((record.get("machine") or {} for record in records if record.get("machine")), {})
    screen = [
        f"gpu-check: {machine.get('device_name', 'no record names the device')}"
        f" (cc {machine.get('compute_capability', '?')}, driver {machine.get('driver', '?')},"
        f" torch {machine.get('torch', '?')}, CUDA {machine.get('cuda', '?')})",
        f"GPU tests: {_last_line(out / 'gpu-tests.txt')}" + (f" (exit {tests_exit})" if tests_exit is not None else ""),
        f"matrix: {_by_status(records)}"
        + (f" (exit {run_exit})" if run_exit is not None else "")
        + (f", {wall_s:.0f} s wall" if wall_s is not None else ""),
        *(cell_line(record) for record in records),
        *multi_gpu(out, gpus, multi_exit),
    ]
    return "\n".join(screen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tests-exit", type=int)
    parser.add_argument("--run-exit", type=int)
    parser.add_argument("--wall-s", type=float)
    parser.add_argument("--gpus", type=int, help="GPUs the machine has")
    parser.add_argument("--multi-exit", type=int, help="exit code of the multi-GPU run")
    args = parser.parse_args()
    print(summary(args.out, args.tests_exit, args.run_exit, args.wall_s, args.gpus, args.multi_exit))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
