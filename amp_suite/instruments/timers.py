"""Step timers, the host CPU time of the timed steps, and percentile statistics.

Timers record per step and synchronise once, when read: CUDA events on a GPU (host code runs
ahead of the device, so host clocks would time kernel launches), perf_counter on a CPU (where
each op finishes before the next starts).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from amp_suite.config import NOISY_SPREAD


@dataclass(frozen=True)
class StepStats:
    p50_ms: float
    p90_ms: float
    mean_ms: float
    stdev_ms: float


WINDOWS = 5  # the timed steps are split into this many windows to see how steady throughput was


@dataclass(frozen=True)
class Spread:
    windows: list[float]  # throughput (samples/s) of consecutive windows of the timed steps
    spread: float | None  # (max - min) / median of the windows; None with fewer than 2 windows
    noisy: bool

    @classmethod
    def of(cls, times_ms: list[float], batch_size: int, windows: int = WINDOWS) -> Spread:
        count = min(windows, len(times_ms))
        edges = [round(i * len(times_ms) / count) for i in range(count + 1)] if count else [0]
        rates = [
            batch_size * (end - start) / (sum(times_ms[start:end]) / 1000)
            for start, end in zip(edges, edges[1:], strict=False)
            if sum(times_ms[start:end]) > 0
        ]
        if len(rates) < 2:
            return cls(rates, None, False)
        spread = (max(rates) - min(rates)) / statistics.median(rates)
        return cls(rates, spread, spread > NOISY_SPREAD)


def step_stats(times_ms: list[float]) -> StepStats:
    if not times_ms:
        raise ValueError("no step times to summarise")
    cuts = statistics.quantiles(times_ms, n=10, method="inclusive") if len(times_ms) > 1 else times_ms * 9
    return StepStats(
        p50_ms=statistics.median(times_ms),
        p90_ms=cuts[8],
        mean_ms=statistics.fmean(times_ms),
        stdev_ms=statistics.stdev(times_ms) if len(times_ms) > 1 else 0.0,
    )


class _Segments:
    """The timed steps as runs of consecutive steps: work between two runs (an evaluation) is in no
    span. `split()` ends a run; `spans_s` holds each run's span once the timer is read."""

    def __init__(self) -> None:
        self._starts = [0]  # the first step of each run
        self.spans_s: list[float] = []

    def split(self) -> None:
        if self._steps() > self._starts[-1]:
            self._starts.append(self._steps())

    def _steps(self) -> int:
        raise NotImplementedError

    def _runs(self) -> list[tuple[int, int]]:
        """(first, last) step of each run that has steps."""
        edges = [*self._starts, self._steps()]
        return [(first, end - 1) for first, end in zip(edges, edges[1:], strict=False) if end > first]


class CpuStepTimer(_Segments):
    """Per-step wall times with perf_counter; the span runs from each run's first start to its last stop."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self._marks: list[tuple[float, float]] = []
        self._start = 0.0

    def _steps(self) -> int:
        return len(self._marks)

    def __enter__(self) -> CpuStepTimer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._marks.append((self._start, time.perf_counter()))

    def read(self) -> tuple[list[float], float]:
        """(per-step milliseconds, the runs' spans in seconds, summed)."""
        times = [(end - start) * 1e3 for start, end in self._marks]
        self.spans_s = [self._marks[last][1] - self._marks[first][0] for first, last in self._runs()]
        return times, sum(self.spans_s)


class CudaStepTimer(_Segments):
    """Per-step device times from CUDA event pairs; read() synchronises once."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self._events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)
        ]
        self._next = 0

    def _steps(self) -> int:
        return self._next

    def __enter__(self) -> CudaStepTimer:
        self._events[self._next][0].record()
        return self

    def __exit__(self, *exc: object) -> None:
        self._events[self._next][1].record()
        self._next += 1

    def read(self) -> tuple[list[float], float]:
        used = self._events[: self._next]
        used[-1][1].synchronize()  # the one sync: wait for the last step to finish
        times = [start.elapsed_time(end) for start, end in used]
        # A span includes device idle time between steps (e.g. when launch-bound), which summing
        # per-step times would hide; throughput is computed from the spans.
        self.spans_s = [used[first][0].elapsed_time(used[last][1]) / 1e3 for first, last in self._runs()]
        return times, sum(self.spans_s)


def make_step_timer(device: torch.device, steps: int) -> CpuStepTimer | CudaStepTimer:
    return CudaStepTimer(steps) if device.type == "cuda" else CpuStepTimer(steps)


class HostCpuTime:
    """CPU time this process spent over a region, every thread of it (torch's intra-op threads
    too), and the region's bounds in the cell's log. On a CPU device it is the work itself, and
    on a shared VM it is the figure steal time does not move: a vCPU the hypervisor takes away
    stops the process's clock but not the wall clock. On a GPU it is the host's launching plus its
    wait for the device when the steps are read (CUDA's sync spins by default). The log lines let
    a benchmark that shares the machine (scripts/bench_overhead.py) see when the timed steps run;
    they are written outside the region."""

    def __init__(self, label: str = "timed steps") -> None:
        self.label = label
        self.seconds = 0.0
        self._start = 0.0
        self._paused = 0.0  # CPU time spent in paused() stretches: not the steps'

    def __enter__(self) -> HostCpuTime:
        print(f"{self.label}: begin at monotonic {time.monotonic():.6f}", flush=True)
        self._start = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.process_time() - self._start - self._paused
        print(f"{self.label}: end at monotonic {time.monotonic():.6f}", flush=True)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the block's CPU time out (an evaluation between timed steps)."""
        start = time.process_time()
        try:
            yield
        finally:
            self._paused += time.process_time() - start
