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
`--sequential` runs each pair's sides one after the other instead, unsliced, to show the drift:
each side runs every mode in turn (one `amp-suite run` of every mode's cell, one bare process of
every mode's loop: a process's start is paid once a pair, not once a mode).

`--device cuda` (scripts/gpu-check.sh) always runs them so: a GPU keeps running what was queued
while its process is stopped, so slices would not share the work out, and a GPU box is not a
shared VM. Both sides then time the steps as the suite does, on CUDA events from the first step's
start to the last step's end.

Per mode: the median per-pair speed ratio suite/bare (below 1: the suite's steps are slower),
its range, and the paired ratio of mean speeds with its 95% interval (amp_suite.analysis.summary, as the
suite reads a speedup from its seeds).
Then each side's own bf16/fp32 and fp16/fp32 speedups: the verdict the suite prints against the
one the bare loop would give. Exits 1 when any mode's median ratio, in CPU time or wall time, is
below 1 - --max-overhead.

    python scripts/bench_overhead.py              # 11 pairs x 3 modes: about 50 minutes on 2 cores
    python scripts/bench_overhead.py --steps 500  # about 25 (bf16 and fp16 are emulated on most CPUs)
    python scripts/bench_overhead.py --device cuda --pairs 3  # fp32, tf32, bf16, fp16: about 2 minutes
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import yaml

from amp_suite.analysis.ratios import paired_ratio, ratio_interval

SMOKE = Path(__file__).resolve().parent.parent / "experiments" / "smoke.yaml"
POLL_S = 0.02  # how often the driver looks for a side's timed steps to begin (they end at a slice's end)
MODES = {"cpu": "fp32,bf16,fp16", "cuda": "fp32,tf32,bf16,fp16"}  # every mode each device runs
# Both sides train the same trajectory from the same weights and batches: their final losses agree,
# to this relative difference (on a CPU they agree bit for bit in practice; on a GPU a library may
# pick another kernel in another process, whose rounding differs).
LOSS_AGREEMENT = {"cpu": 1e-6, "cuda": 1e-3}


@dataclass(frozen=True)
class Timed:
    """What a side reports for one mode: per timed step its CPU time (every thread of the
    process) and wall time, its final loss, and its timed steps' bounds on the shared monotonic
    clock."""

    precision: str
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
    """smoke.yaml's mlp, eager, without its target, with the benchmark's step counts. Its modes run
    one after another, each whole: the benchmark pairs each mode's timed steps with the bare loop's
    (by the bounds the cell logs), where side by side the suite's modes would take turns inside them."""
    matrix = yaml.safe_load(SMOKE.read_text())
    mlp = next(w for w in matrix["workloads"] if w["workload"] == "mlp")
    mlp["compile"] = [False]
    # No time to target: its evaluations (a sync and two NVML readings each on a GPU) are work the
    # bare loop, which never evaluates, does not do. Like for like, neither side evaluates.
    mlp.pop("target", None)
    matrix.update(name="bench-overhead", steps=steps, warmup_steps=warmup, workloads=[mlp], side_by_side=False)
    path = folder / "bench-overhead.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


class Stopped(Exception):
    """The driver got SIGINT or SIGTERM (gpu-check's stage budget ends with SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stopped(signum: int, frame: object) -> None:
    raise Stopped(signum)


class Side:
    """One process group the driver starts, stops and continues; `begun`/`ended` bound its timed
    steps. It keeps the monotonic intervals it was let run, from the moment the driver slices.
    Each side runs in a session of its own, so a signal to the driver's group does not reach it:
    `live` holds the sides the driver ends when it is stopped itself (`end_all`)."""

    live: set[Side] = set()
    process: subprocess.Popen
    intervals: list[tuple[float, float]] | None = None  # None: never stopped once the timing began
    _since: float | None = None

    def _start(self, command: list[str], **popen: object) -> None:
        self.process = subprocess.Popen(command, text=True, start_new_session=True, **popen)
        Side.live.add(self)

    @classmethod
    def end_all(cls) -> None:
        """SIGTERM to every live side's group (the suite closes its run and stops its cell), then
        SIGKILL to what is left after 10 s: nothing of a side outlives the driver."""
        for side in cls.live:
            side._signal(signal.SIGTERM)
            side._signal(signal.SIGCONT)  # a side stopped between slices must run to end
        for side in cls.live:
            try:
                side.process.wait(10)
            except subprocess.TimeoutExpired:
                side._signal(signal.SIGKILL)
                side.process.wait()
        cls.live.clear()

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

    def timed(self) -> list[Timed]: ...

    def result(self) -> list[Timed]:
        """Once the process has ended: each of its modes' timings, in the order they were asked for."""
        timings = self.timed()
        Side.live.discard(self)
        return [timed.running_wall(self.intervals) for timed in timings]


class SuiteSide(Side):
    """`amp-suite run` of the mlp cell in each mode, as a user runs it (embedded MLflow store included).
    Sliced in lockstep, it runs one mode (one cell, one log)."""

    def __init__(self, matrix: Path, precisions: list[str], folder: Path, device: str) -> None:
        self.out, self.precisions = Path(tempfile.mkdtemp(dir=folder)), precisions
        command = [sys.executable, "-m", "amp_suite", "run", "--matrix", str(matrix), "--out", str(self.out),
                   "--precisions", ",".join(precisions), "--device", device, "--force"]  # fmt: skip
        self.output = self.out.parent / f"{self.out.name}.txt"  # a file, not a pipe: nobody reads it while it runs
        with self.output.open("w") as output:
            self._start(command, stdout=output, stderr=subprocess.STDOUT)

    def _log(self, cell_id: str | None = None) -> str:
        """A cell's own log (not tracking.log): the one cell's, or the named one's (rundir.RunDir's name)."""
        pattern = "mlp_*.log" if cell_id is None else cell_id.replace("/", "_") + ".log"
        logs = list((self.out / "logs").glob(pattern))
        return logs[0].read_text(errors="replace") if logs else ""

    def begun(self) -> bool:
        return "timed steps: begin" in self._log()

    def ended(self) -> bool:
        return "timed steps: end" in self._log() or self.process.poll() is not None

    def start_timed(self) -> None:
        """The cell reaches its timed steps by itself."""

    def timed(self) -> list[Timed]:
        self.process.wait()
        output = self.output.read_text(errors="replace")
        results = self.out / "results.jsonl"
        records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        by_mode = {record["precision"]: record for record in records}
        for precision in self.precisions:
            record = by_mode.get(precision)
            if record is None or record["status"] != "ok":
                reason = record["reason"] if record else output[-2000:]
                raise SystemExit(f"suite {precision} cell did not run (exit {self.process.returncode}): {reason}")
        return [self._timed(by_mode[precision]) for precision in self.precisions]

    def _timed(self, record: dict) -> Timed:
        bounds = dict(re.findall(r"timed steps: (begin|end) at monotonic ([0-9.]+)", self._log(record["cell_id"])))
        wall_ms = 1e3 * record["batch_size"] / record["throughput"]  # the suite's span: CUDA events on a GPU
        return Timed(record["precision"], record["host_cpu_ms_per_step"], wall_ms, record["final_loss"],
                     float(bounds["begin"]), float(bounds["end"]), record["steps"])  # fmt: skip


class BareSide(Side):
    """The bare loop in a plain process, each mode in turn. Gated (to be sliced in lockstep), it
    runs one mode and, set up and warmed up, waits for a go before its timed steps."""

    def __init__(self, matrix: Path, precisions: list[str], device: str, gated: bool) -> None:
        command = [sys.executable, __file__, "--bare", ",".join(precisions), "--matrix", str(matrix),
                   "--device", device, *(["--gated"] if gated else [])]  # fmt: skip
        self._start(command, stdin=subprocess.PIPE if gated else subprocess.DEVNULL, stdout=subprocess.PIPE)
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

    def timed(self) -> list[Timed]:
        self._read_ready()
        if "" not in self._lines:  # the rest, to the end: select() cannot see lines already buffered
            self._lines += [line.strip() for line in self.process.stdout.read().splitlines()]
        self.process.wait()
        timed = [Timed(**json.loads(line)) for line in self._lines if line.startswith("{")]
        if self.process.returncode or not timed:
            raise SystemExit(f"bare loop failed (exit {self.process.returncode})")
        return timed


def lockstep(suite: Side, bare: Side, first: Side, slice_s: float) -> tuple[list[Timed], list[Timed]]:
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


def in_turn(first: Callable[[], Side], second: Callable[[], Side]) -> tuple[list[Timed], list[Timed]]:
    """Each side started once the other has ended, unsliced: (first's, second's)."""
    ran_first = first().result()
    return ran_first, second().result()


def bare_loop(matrix_path: Path, precisions: list[str], device_name: str, gated: bool) -> None:
    """The AMP recipe's loop, nothing else, in this (fresh) process, each mode from the same
    initial weights: autocast around forward + loss, a GradScaler for fp16 (scale -> backward,
    unscale_ before clipping, step, update). Prints one Timed (JSON) a mode."""
    import torch

    from amp_suite.config import load_matrix
    from amp_suite.data import batch_order
    from amp_suite.workloads import build_workload

    device, matrix = torch.device(device_name), load_matrix(matrix_path)
    for precision in precisions:
        spec = matrix.select(None, [precision]).cells(device_name, force=True)[0]
        workload = build_workload(spec.workload)
        data = workload.load_data().train
        torch.manual_seed(spec.seed)
        model = workload.build_model(data).to(device)
        optimizer = workload.make_optimizer(model)
        order = batch_order(len(data), spec.batch_size, spec.warmup_steps + spec.steps, spec.seed)
        inputs, targets = data.inputs.to(device), data.targets.to(device)
        batches = [(inputs[i], targets[i]) for i in order]  # gathered before the timed steps
        # tf32 is fp32 with TF32 matmuls; every other mode keeps fp32 math exact, as the suite does.
        torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
        print(json.dumps(timed_steps(model, optimizer, batches, spec, device, gated).__dict__), flush=True)
        del model, optimizer, batches


def timed_steps(model, optimizer, batches, spec, device, gated: bool) -> Timed:
    """Warm up, wait for the go when gated, then time the steps: perf_counter on a CPU; on a GPU
    CUDA events from the first step's start to the last step's end, as the suite's timer does."""
    import torch

    precision = spec.precision
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    # fp32 and tf32 enter no autocast region at all, as the suite's policies do (not a disabled one).
    forward = partial(torch.autocast, device.type, dtype=dtype) if dtype is not None else nullcontext

    def step(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with forward():
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
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if gated:
        print("ready", flush=True)
        sys.stdin.readline()  # the go: the driver runs the timed steps in lockstep with the suite's
    begin, cpu, clock = time.monotonic(), time.process_time(), time.perf_counter()
    if cuda:
        first.record()
    for inputs, targets in batches[spec.warmup_steps :]:
        loss = step(inputs, targets)
    if cuda:
        last.record()
        last.synchronize()
        span_s = first.elapsed_time(last) / 1e3
    else:
        span_s = time.perf_counter() - clock
    cpu, end = time.process_time() - cpu, time.monotonic()
    return Timed(precision, cpu * 1e3 / spec.steps, span_s * 1e3 / spec.steps, float(loss.detach()), begin, end,
                 spec.steps)  # fmt: skip


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
    parser.add_argument("--device", choices=sorted(MODES), default="cpu")
    parser.add_argument("--precisions", help="comma-separated modes (default: every mode the device runs)")
    parser.add_argument("--max-overhead", type=float, default=0.02, help="allowed slowdown, as a fraction")
    parser.add_argument("--slice", type=float, default=0.05, help="seconds each side runs before they swap")
    parser.add_argument("--sequential", action="store_true", help="run each pair's sides one after the other")
    parser.add_argument("--bare", help=argparse.SUPPRESS)  # internal: run the bare loop in this process
    parser.add_argument("--matrix", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--gated", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare_loop(args.matrix, args.bare.split(","), args.device, args.gated)
        return 0
    precisions = (args.precisions or MODES[args.device]).split(",")

    one_after_the_other = args.sequential or args.device == "cuda"
    how = "one after the other" if one_after_the_other else f"in lockstep, {args.slice * 1e3:.0f} ms slices"
    found: Pairs = {precision: [] for precision in precisions}  # filled pair by pair
    signal.signal(signal.SIGTERM, _stopped)
    signal.signal(signal.SIGINT, _stopped)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        matrix = bench_matrix(args.steps, args.warmup, folder)
        pairs = f"{args.pairs} pair" + ("s" if args.pairs != 1 else "")
        print(f"mlp cell, {args.device}, {args.steps} timed steps, {pairs} {how}; speed ratios suite/bare")
        try:
            if one_after_the_other:
                pairs_in_turn(matrix, folder, args.device, args.pairs, found)
            else:
                for precision in precisions:
                    lockstep_pairs(matrix, precision, folder, args, found[precision])
        except Stopped as stopped:
            Side.end_all()
            done = {precision: pairs for precision, pairs in found.items() if pairs}
            print(f"stopped by {stopped}: the figures of the pairs that ended", flush=True)
            if done:
                report(done, args.device, args.max_overhead)
            return 128 + stopped.signum
    return report(found, args.device, args.max_overhead)


Pairs = dict[str, list[tuple[Timed, Timed]]]  # per mode, its (suite, bare) pairs


def pairs_in_turn(matrix: Path, folder: Path, device: str, pairs: int, found: Pairs) -> None:
    """Every mode's pairs, a pair being one suite run of every mode and one bare process of every
    mode, one after the other; who runs first alternates."""
    precisions = list(found)
    for pair in range(pairs):
        suite = partial(SuiteSide, matrix, precisions, folder, device)
        bare = partial(BareSide, matrix, precisions, device, gated=False)
        if pair % 2 == 0:
            suite_timings, bare_timings = in_turn(suite, bare)
        else:
            bare_timings, suite_timings = in_turn(bare, suite)
        for suite_timed, bare_timed in zip(suite_timings, bare_timings, strict=True):
            found[suite_timed.precision].append((suite_timed, bare_timed))
            print_pair(pair, pairs, suite_timed, bare_timed)


def lockstep_pairs(
    matrix: Path, precision: str, folder: Path, args: argparse.Namespace, found: list[tuple[Timed, Timed]]
) -> None:
    """One mode's pairs on a CPU, sliced in lockstep; who runs first alternates."""
    for pair in range(args.pairs):
        suite, bare = SuiteSide(matrix, [precision], folder, "cpu"), BareSide(matrix, [precision], "cpu", gated=True)
        first = suite if pair % 2 == 0 else bare
        (suite_timed,), (bare_timed,) = lockstep(suite, bare, first, args.slice)
        found.append((suite_timed, bare_timed))
        print_pair(pair, args.pairs, suite_timed, bare_timed)


def print_pair(pair: int, pairs: int, suite: Timed, bare: Timed) -> None:
    """Progress: a pair's speed ratios as it ends (the summary follows each mode's last pair)."""
    ratios = f"CPU {bare.cpu_ms / suite.cpu_ms:.3f}, wall {bare.wall_ms / suite.wall_ms:.3f}"
    print(f"  {suite.precision} pair {pair + 1} of {pairs}: {ratios}", flush=True)


def report(found: Pairs, device: str, max_overhead: float) -> int:
    """Per mode its ratios, then each side's verdicts and the budget's; 1 when over it."""
    lowest = {}
    for precision, pairs in found.items():
        for suite, bare in pairs:
            if not math.isclose(suite.final_loss, bare.final_loss, rel_tol=LOSS_AGREEMENT[device]):
                raise SystemExit(f"{precision}: the sides trained differently: final losses {suite} {bare}")
        cpu_median, cpu_line = describe("CPU time", [s.cpu_ms for s, _ in pairs], [b.cpu_ms for _, b in pairs])
        wall_median, wall_line = describe("wall time", [s.wall_ms for s, _ in pairs], [b.wall_ms for _, b in pairs])
        print(f"{precision}: {cpu_line} | {wall_line}", flush=True)
        suite_ms, bare_ms = (statistics.median(t.cpu_ms for t in side) for side in zip(*pairs, strict=True))
        print(f"      CPU ms per step: suite {suite_ms:.3f}, bare {bare_ms:.3f} (medians)", flush=True)
        lowest[precision] = cpu_median, wall_median
    for precision in [mode for mode in found if mode != "fp32" and "fp32" in found]:
        suite, bare = ("/".join(f"{speedup(found, precision, side, clock):.3f}" for clock in ("cpu_ms", "wall_ms"))
                       for side in (0, 1))  # fmt: skip
        print(f"{precision}/fp32 speedup in CPU/wall time: suite {suite}, bare {bare}")
    over = [precision for precision, ratios in lowest.items() if min(ratios) < 1 - max_overhead]
    verdict = f"OVER {max_overhead:.0%} in {', '.join(over)}" if over else f"within {max_overhead:.0%}"
    medians = ", ".join(f"{precision} {cpu:.3f}/{wall:.3f}" for precision, (cpu, wall) in lowest.items())
    # The last line, which scripts/gpu-check.sh shows (its first 140 characters): the verdict first.
    print(f"overhead {verdict} (median suite/bare speed, CPU/wall): {medians}")
    return 1 if over else 0


def speedup(found: Pairs, precision: str, side: int, clock: str) -> float:
    """The verdict one side (0: suite, 1: bare) would print: this mode's speed over fp32's, from
    medians of the pairs (different pairs: the drift between them is not cancelled, only within)."""
    fp32, mode = (statistics.median(getattr(pair[side], clock) for pair in found[m]) for m in ("fp32", precision))
    return fp32 / mode


if __name__ == "__main__":
    raise SystemExit(main())
