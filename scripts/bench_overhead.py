#!/usr/bin/env python3
"""What does the harness cost, on the path users run? The mlp cell through `amp-suite run` (CLI ->
forkserver worker -> cell, with every measurement switched on) against the PyTorch AMP recipe's
loop run bare in a plain process: same model, data, batch order, optimizer, clipping and step
count, in every mode a CPU runs (fp32, bf16, and fp16 with its GradScaler, forced).

Pairs run in lockstep by default. A shared VM's speed drifts by up to 2x over seconds (other
tenants, not steal: a thread's CPU time drifts with its wall time), so two runs one after the other
cannot be compared to 2%. Here both sides start, and once both reach their timed steps (the cell
logs "timed steps: begin"; the bare loop waits, warmed up, for a go) the driver lets exactly one of
them run at a time, swapping every --slice seconds with SIGSTOP/SIGCONT of its process group. Both
then see the same drift, slice by slice. The instrument is CPU time per timed step (the cell's
host_cpu_ms_per_step, every thread of the process): it stops while a side is stopped. Wall time
per step is printed beside it, counted only while the side ran (the driver keeps the intervals it
let each side run; each side states its timed steps' bounds on the shared monotonic clock).
`--sequential` runs each pair's sides one after the other instead, unsliced, to show the drift.

Per mode: the median per-pair speed ratio suite/bare (below 1: the suite's steps are slower),
its range, and the paired ratio of mean speeds with its 95% interval (amp_suite.summary, as the
suite reads a speedup from its seeds).
Then each side's own bf16/fp32 and fp16/fp32 speedups: the verdict the suite prints against the
one the bare loop would give. Exits 1 when any mode's median ratio, in CPU time or wall time, is
below 1 - --max-overhead.

    python scripts/bench_overhead.py              # 11 pairs x 3 modes: about 50 minutes on 2 cores
    python scripts/bench_overhead.py --steps 500  # about 25 (bf16 and fp16 are emulated on most CPUs)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from amp_suite.summary import paired_ratio, ratio_interval

SMOKE = Path(__file__).resolve().parent.parent / "experiments" / "smoke.yaml"
POLL_S = 0.02  # how often the driver looks for a side's timed steps to begin (they end at a slice's end)


@dataclass(frozen=True)
class Timed:
    """What a side reports: per timed step its CPU time (every thread of the process) and wall
    time, its final loss (both sides train the same trajectory: their last losses agree), and its
    timed steps' bounds on the shared monotonic clock."""

    cpu_ms: float
    wall_ms: float
    final_loss: float
    begin: float
    end: float
    steps: int

    def running_wall(self, intervals: list[tuple[float, float]] | None) -> Timed:
        """The same, wall time counted only while it ran (intervals None: it ran throughout)."""
        if intervals is None:
            return self
        ran = sum(max(0.0, min(stop, self.end) - max(start, self.begin)) for start, stop in intervals)
        return replace(self, wall_ms=ran * 1e3 / self.steps)


def bench_matrix(steps: int, warmup: int, folder: Path) -> Path:
    """smoke.yaml's mlp, eager, with the benchmark's step counts."""
    matrix = yaml.safe_load(SMOKE.read_text())
    mlp = next(w for w in matrix["workloads"] if w["workload"] == "mlp")
    mlp["compile"] = [False]
    matrix.update(name="bench-overhead", steps=steps, warmup_steps=warmup, workloads=[mlp])
    path = folder / "bench-overhead.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


class Side:
    """One process group the driver starts, stops and continues; `begun`/`ended` bound its timed
    steps. It keeps the monotonic intervals it was let run, from the moment the driver slices."""

    process: subprocess.Popen
    intervals: list[tuple[float, float]] | None = None  # None: never stopped once the timing began
    _since: float | None = None

    def stop(self) -> None:
        self._signal(signal.SIGSTOP)
        if self._since is not None:
            self.intervals.append((self._since, time.monotonic()))
            self._since = None

    def resume(self, track: bool = True) -> None:
        if track and self.intervals is not None:
            self._since = time.monotonic()
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:  # the side already ended (its result says how)
            pass

    def track(self) -> None:
        self.intervals = []

    def begun(self) -> bool: ...

    def start_timed(self) -> None: ...

    def ended(self) -> bool: ...

    def timed(self) -> Timed: ...

    def result(self) -> Timed:
        return self.timed().running_wall(self.intervals)


class SuiteSide(Side):
    """`amp-suite run` of the one mlp cell, as a user runs it (embedded MLflow store included)."""

    def __init__(self, matrix: Path, precision: str, folder: Path) -> None:
        self.out = Path(tempfile.mkdtemp(dir=folder))
        command = [sys.executable, "-m", "amp_suite", "run", "--matrix", str(matrix), "--out", str(self.out),
                   "--precisions", precision, "--device", "cpu", "--force"]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )

    def _log(self) -> str:
        logs = list((self.out / "logs").glob("mlp_*.log"))  # the cell's own log, not tracking.log
        return logs[0].read_text(errors="replace") if logs else ""

    def begun(self) -> bool:
        return "timed steps: begin" in self._log()

    def ended(self) -> bool:
        return "timed steps: end" in self._log() or self.process.poll() is not None

    def start_timed(self) -> None:
        """The cell reaches its timed steps by itself."""

    def timed(self) -> Timed:
        output = self.process.communicate()[0]
        results = self.out / "results.jsonl"
        records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        if len(records) != 1 or records[0]["status"] != "ok":
            reason = records[0]["reason"] if records else output[-2000:]
            raise SystemExit(f"suite cell did not run (exit {self.process.returncode}): {reason}")
        (record,) = records
        bounds = dict(re.findall(r"timed steps: (begin|end) at monotonic ([0-9.]+)", self._log()))
        wall_ms = 1e3 * record["batch_size"] / record["throughput"]
        return Timed(record["host_cpu_ms_per_step"], wall_ms, record["final_loss"],
                     float(bounds["begin"]), float(bounds["end"]), record["steps"])  # fmt: skip


class BareSide(Side):
    """The bare loop in a plain process: set up and warmed up, it waits for a go before its timed steps."""

    def __init__(self, matrix: Path, precision: str) -> None:
        command = [sys.executable, __file__, "--bare", precision, "--matrix", str(matrix)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        self._lines: list[str] = []

    def _read_ready(self) -> None:
        while self._selector.select(timeout=0):
            line = self.process.stdout.readline()
            if not line:
                self._selector.unregister(self.process.stdout)
                self._lines.append("")
                return
            self._lines.append(line.strip())

    def begun(self) -> bool:
        self._read_ready()
        return "ready" in self._lines or "" in self._lines

    def start_timed(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def ended(self) -> bool:
        self._read_ready()
        return any(line.startswith("{") for line in self._lines) or "" in self._lines

    def timed(self) -> Timed:
        self._read_ready()
        self.process.wait()
        timed = [line for line in self._lines if line.startswith("{")]
        if self.process.returncode or not timed:
            raise SystemExit(f"bare loop failed (exit {self.process.returncode})")
        return Timed(**json.loads(timed[0]))


def lockstep(suite: Side, bare: Side, first: Side, slice_s: float) -> tuple[Timed, Timed]:
    """Run both sides' timed steps in alternating slices, never both at once (see the docstring)."""
    for side in (suite, bare):  # each gets to its timed steps with the machine to itself where it can
        while not side.begun():
            if side.process.poll() is not None:
                break
            time.sleep(POLL_S)
        side.stop()
    for side in (suite, bare):
        side.start_timed()
        side.track()
    running, waiting = first, (bare if first is suite else suite)
    running.resume()
    while not (running.ended() and waiting.ended()):
        # Looked at only between slices: the driver's own work would fall on the running side. A
        # side that ends its timed steps mid-slice goes on alone (its evaluation) until the swap.
        time.sleep(slice_s)
        if not waiting.ended():  # swap; a side whose timed steps ended waits, so it never overlaps
            running.stop()
            waiting.resume()
            running, waiting = waiting, running
    running.stop()
    for side in (suite, bare):  # both timed regions are over: let them finish, one at a time
        side.resume(track=False)
        side.process.wait()
    return suite.result(), bare.result()


def sequential(suite: Side, bare: Side, first: Side) -> tuple[Timed, Timed]:
    """Each side alone, one after the other: what a pair of plain runs sees on this machine."""
    suite.stop()
    bare.stop()
    for side in (first, bare if first is suite else suite):
        side.resume()
        while not side.begun() and side.process.poll() is None:
            time.sleep(POLL_S)
        side.start_timed()
        side.process.wait()
    return suite.result(), bare.result()


def bare_loop(matrix_path: Path, precision: str) -> None:
    """The AMP recipe's loop, nothing else, in this (fresh) process: autocast around forward + loss,
    a GradScaler for fp16 (scale -> backward, unscale_ before clipping, step, update)."""
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
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm)
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for inputs, targets in batches[: spec.warmup_steps]:
        step(inputs, targets)
    print("ready", flush=True)
    sys.stdin.readline()  # the go: the driver runs the timed steps in lockstep with the suite's
    begin, cpu = time.monotonic(), time.process_time()
    for inputs, targets in batches[spec.warmup_steps :]:
        loss = step(inputs, targets)
    end, cpu = time.monotonic(), time.process_time() - cpu
    per_step_ms = cpu * 1e3 / spec.steps, (end - begin) * 1e3 / spec.steps
    timed = Timed(*per_step_ms, float(loss.detach()), begin, end, spec.steps)
    print(json.dumps(timed.__dict__), flush=True)


def describe(name: str, suite: list[float], bare: list[float]) -> tuple[float, str]:
    """Median per-pair speed ratio suite/bare (per-step times inverted), and a line about it."""
    ratios = [b / s for s, b in zip(suite, bare, strict=True)]
    speeds = dict(enumerate(1 / s for s in suite)), dict(enumerate(1 / b for b in bare))
    mean_ratio = paired_ratio(*speeds)
    low, high = ratio_interval(*speeds) or (mean_ratio, mean_ratio)
    median = statistics.median(ratios)
    line = (
        f"{name} median {median:.3f} (pairs {min(ratios):.3f}-{max(ratios):.3f}),"
        f" mean ratio {mean_ratio:.3f} [95% {low:.3f}-{high:.3f}]"
    )
    return median, line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=11)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--max-overhead", type=float, default=0.02, help="allowed slowdown, as a fraction")
    parser.add_argument("--slice", type=float, default=0.05, help="seconds each side runs before they swap")
    parser.add_argument("--sequential", action="store_true", help="run each pair's sides one after the other")
    parser.add_argument("--bare", help=argparse.SUPPRESS)  # internal: run the bare loop in this process
    parser.add_argument("--matrix", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare_loop(args.matrix, args.bare)
        return 0

    budget, lowest = 1 - args.max_overhead, {}
    cpu_by_mode: dict[str, tuple[list[float], list[float]]] = {}
    how = "one after the other" if args.sequential else f"in lockstep, {args.slice * 1e3:.0f} ms slices"
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        matrix = bench_matrix(args.steps, args.warmup, folder)
        print(f"mlp cell, CPU, {args.steps} timed steps, {args.pairs} pairs {how}; ratios are speed, suite/bare")
        for precision in args.precisions.split(","):
            suite, bare = [], []
            for pair in range(args.pairs):
                suite_side, bare_side = SuiteSide(matrix, precision, folder), BareSide(matrix, precision)
                first = suite_side if pair % 2 == 0 else bare_side  # who runs first alternates
                if args.sequential:
                    timings = sequential(suite_side, bare_side, first)
                else:
                    timings = lockstep(suite_side, bare_side, first, args.slice)
                if abs(timings[0].final_loss - timings[1].final_loss) > 1e-6 * max(1.0, abs(timings[1].final_loss)):
                    raise SystemExit(f"{precision}: the sides trained differently: final losses {timings}")
                suite.append(timings[0])
                bare.append(timings[1])
            cpu_by_mode[precision] = [t.cpu_ms for t in suite], [t.cpu_ms for t in bare]
            cpu_median, cpu_line = describe("CPU time", *cpu_by_mode[precision])
            wall_median, wall_line = describe("wall time", [t.wall_ms for t in suite], [t.wall_ms for t in bare])
            print(f"{precision}: {cpu_line} | {wall_line}", flush=True)
            suite_ms, bare_ms = (statistics.median(times) for times in cpu_by_mode[precision])
            print(f"      CPU ms per step: suite {suite_ms:.3f}, bare {bare_ms:.3f} (medians)", flush=True)
            lowest[precision] = min(cpu_median, wall_median)
    if "fp32" in cpu_by_mode:
        for precision in [mode for mode in cpu_by_mode if mode != "fp32"]:
            # The verdict each side would print: this mode's speed over fp32's, from medians of the
            # pairs (different pairs: the drift between them is not cancelled, only within them).
            verdicts = [
                statistics.median(reference) / statistics.median(mode)
                for mode, reference in zip(cpu_by_mode[precision], cpu_by_mode["fp32"], strict=True)
            ]
            print(f"{precision}/fp32 speedup in CPU time: suite {verdicts[0]:.3f}, bare {verdicts[1]:.3f}")
    over = [precision for precision, ratio in lowest.items() if ratio < budget]
    verdict = f"OVER the {args.max_overhead:.0%} budget: {', '.join(over)}" if over else "within budget"
    print(f"harness overhead: worst median ratio {min(lowest.values()):.3f} ({verdict})")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
