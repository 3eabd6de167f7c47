#!/usr/bin/env python3
"""Can a busy machine flip the answer? An MLP matrix in fp32 and bf16 (bf16 forced where the CPU
lacks it), run through `amp-suite run` as a user runs it: first on the quiet machine, then while a
CPU hog switches on and off beside it. Prints each run's answer (from its report.json) and, at the
end, whether any busy run recommended a mode that the quiet runs measured as slower than fp32, and
whether any two conclusive answers, quiet or busy, differ. Exits 1 if either happened. An
inconclusive answer flips nothing: it is the product saying it can't tell, and why (a "quiet" run
on a shared machine may see its neighbours: in CI one did, fp32 ranging 47,465-66,341 samples/s).

The hog is this script's own child, in its process group: one spinning process per core, all on
for a random 0.2-1.5 s, then all off for as long, until the busy runs end (and at most --hog-limit
seconds in any case).

    python scripts/busy_machine.py                      # 3 quiet runs, 5 busy ones: about 1.5 minutes on 2 cores
    python scripts/busy_machine.py --quiet 2 --busy 2   # what tests/e2e/test_busy_machine.py runs
    python scripts/busy_machine.py --stopping fixed     # the fixed schedule alone: the answer before sequential timing
    PYTHONPATH=/path/to/other/checkout python scripts/busy_machine.py   # another version of the suite
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

MATRIX = {
    "name": "busy-machine",
    "seed": 0,
    "repeats": 1,
    "warmup_steps": 5,
    "steps": 600,  # windows of 100 steps (~0.2 s here): a hiccup of the host reads as a few percent of one
    "precisions": ["fp32", "bf16"],
    "workloads": [
        {"workload": "mlp", "hidden": 256, "depth": 3, "num_classes": 10, "batch_sizes": [64], "samples": 2048,
         "lr": 0.001, "data": {"source": "digits"}, "force": ["bf16"]},
    ],
}  # fmt: skip
HOG = """
import os, random, sys, time
end, seed = float(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
while time.monotonic() < end:
    on = time.monotonic() + rng.uniform(0.2, 1.5)
    while time.monotonic() < min(on, end):
        pass
    time.sleep(max(0.0, min(rng.uniform(0.2, 1.5), end - time.monotonic())))
"""


@dataclass(frozen=True)
class Answer:
    """One run's answer for the MLP, as report.json gives it (older versions lack `verdict` and `speedups`)."""

    mode: str | None
    verdict: str
    speedup: float | None  # bf16 over fp32, whatever the answer
    sentence: str
    timing: dict | None = None  # how the comparison's timing stopped (records' timing_stop; older versions: None)
    wall_s: float = 0.0  # the whole `amp-suite run`

    @property
    def recommends_bf16(self) -> bool:
        return self.mode == "bf16"

    @property
    def conclusive(self) -> bool:
        return self.verdict != "inconclusive"


def run_once(matrix: Path, out: Path) -> Answer:
    command = [sys.executable, "-m", "amp_suite", "run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall_s = time.monotonic() - started
    if done.returncode not in (0, 4):  # 4: a one-seed parity verdict may be beyond its margin
        raise SystemExit(f"amp-suite run exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    report = json.loads((out / "report" / "report.json").read_text())
    (answer,) = report["answer"]
    row = next(r for r in report["rows"] if r["precision"] == "bf16")
    verdict = answer.get("verdict") or {"fp32": "stay", None: "inconclusive"}.get(answer["mode"], "recommended")
    if "speedups" in row:
        speedup = row["speedups"].get("fp32")  # a Ratio: value, interval, seeds
        speedup = speedup and speedup["value"]
    else:  # older versions name it speedup_vs_fp32
        speedup = row["speedup_vs_fp32"]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    timing = next((r.get("timing_stop") for r in records if r.get("timing_stop")), None)
    return Answer(answer["mode"], verdict, speedup, answer["sentence"], timing, wall_s)


def timing_words(answer: Answer) -> str:
    """" (decided after 9 rounds, 4 s; run 12 s)": how long the comparison was timed, and why it stopped."""
    if answer.timing is None:
        return f" (run {answer.wall_s:.0f} s)"
    t = answer.timing
    return f" ({t['stopped']} after {t['rounds']} rounds, {t['seconds']:.0f} s; run {answer.wall_s:.0f} s)"


class Hog:
    """One spinning process per core, switching on and off together; bounded in time."""

    def __init__(self, limit_s: float, seed: int = 0) -> None:
        end = time.monotonic() + limit_s
        cores = os.cpu_count() or 1
        self.processes = [
            subprocess.Popen([sys.executable, "-c", HOG, str(end), str(seed)]) for _ in range(cores)
        ]  # fmt: skip

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet", type=int, default=3, help="runs on the quiet machine (default 3)")
    parser.add_argument("--busy", type=int, default=5, help="runs beside the switching hog (default 5)")
    parser.add_argument("--steps", type=int, default=MATRIX["steps"], help="timed steps per cell")
    parser.add_argument("--hog-limit", type=float, default=600.0, help="the hog's longest life, in seconds")
    parser.add_argument("--json", type=Path, help="write the answers here as JSON")
    stopping_help = "the matrix's stopping; default: the suite's"
    parser.add_argument("--stopping", choices=("sequential", "fixed"), help=stopping_help)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="busy-machine-"))
    matrix = folder / "matrix.yaml"
    stopping = {"stopping": args.stopping} if args.stopping else {}  # older versions know no such key
    matrix.write_text(yaml.safe_dump({**MATRIX, "steps": args.steps, **stopping}))
    quiet = [run_once(matrix, folder / f"quiet-{i}") for i in range(args.quiet)]
    for i, answer in enumerate(quiet):
        print(f"quiet {i + 1}: {answer.sentence}{timing_words(answer)}", flush=True)
    hog = Hog(args.hog_limit, seed=random.randrange(1 << 30))
    try:
        busy = [run_once(matrix, folder / f"busy-{i}") for i in range(args.busy)]
    finally:
        hog.stop()
    for i, answer in enumerate(busy):
        print(f"busy {i + 1}: {answer.sentence}{timing_words(answer)}", flush=True)
    slower = all(a.speedup is not None and a.speedup < 1 for a in quiet)
    flipped = [a for a in busy if slower and a.recommends_bf16]
    conclusive = {(a.verdict, a.mode) for a in quiet + busy if a.conclusive}
    agree = len(conclusive) <= 1
    print(f"quiet runs measured bf16 {'slower' if slower else 'not slower'} than fp32"
          f" ({', '.join(f'{a.speedup:.2f}x' for a in quiet if a.speedup)});"
          f" conclusive answers: {sum(a.conclusive for a in quiet)} of {len(quiet)} quiet,"
          f" {sum(a.conclusive for a in busy)} of {len(busy)} busy, and they agree: {agree};"
          f" busy runs that recommended bf16 all the same: {len(flipped)} of {len(busy)}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"quiet": [a.__dict__ for a in quiet], "busy": [a.__dict__ for a in busy]}))
    return 1 if flipped or not agree else 0


if __name__ == "__main__":
    sys.exit(main())
