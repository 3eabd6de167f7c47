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
from dataclasses import dataclass, replace

import torch

from amp_suite.config import NOISY_SPREAD


@dataclass(frozen=True)
class StepStats:
    p50_ms: float
    p90_ms: float
    mean_ms: float
    stdev_ms: float


@dataclass(frozen=True)
class Span:
    """A run of consecutive timed steps: work between two runs (an evaluation, a turn handed over)
    is in none."""

    first: int  # the run's first step, counted among the steps trained since the timed region began
    end: int  # one past its last step
    seconds: float  # from its first step's start to its last step's end

    @property
    def steps(self) -> int:
        return self.end - self.first


# A window is set aside when it lies further from the median window than OUTLIER_SPREADS robust
# spreads (1.4826 x the median absolute deviation: a standard deviation where the windows are
# normal) and further than NOISY_SPREAD (alone it would make the cell noisy): a hiccup (another
# process's burst, a page-cache flush) that hit one window, not the cell's speed. At most one
# window in SET_ASIDE_SHARE, and none of fewer than MIN_WINDOWS_TO_SET_ASIDE: a cell whose windows
# scatter widely stays noisy.
OUTLIER_SPREADS = 4.0
# A cell's first windows run slower where its step time has not settled by the end of the fixed
# warmup (a ViT's first timed window ran 10x slower on a CPU: allocator growth, oneDNN picking its
# kernels, clocks ramping). Warmup is not lengthened to wait for it: every precision trains the same
# steps on the same batches. The measurement starts where the step time settled instead: each
# leading window slower than the later half's median by more than NOISY_SPREAD is still warmup, set
# aside and listed, at most half of the windows (the cap), none of fewer than MIN_WINDOWS_TO_SETTLE.
MIN_WINDOWS_TO_SETTLE = 4  # the later half, two windows at least, sets what settled means
SET_ASIDE_SHARE = 6
MIN_WINDOWS_TO_SET_ASIDE = 5


@dataclass(frozen=True)
class SetAside:
    """A window left out of the cell's throughput, spread and pairs, and why."""

    window: int  # its index among the windows
    samples_per_s: float
    reason: str


@dataclass(frozen=True)
class Spread:
    windows: list[float]  # throughput (samples/s) of each window of the timed steps, every one
    spread: float | None  # (max - min) / median of the windows kept; None with fewer than 2
    noisy: bool
    set_aside: tuple[SetAside, ...] = ()
    samples: int = 0  # over the windows kept: what throughput counts
    seconds: float = 0.0
    warming: int = 0  # the first windows, set aside: the step time had not settled yet

    @classmethod
    def of(cls, spans: list[Span], edges: list[int], samples_per_step: int) -> Spread:
        """Each window's rate over the spans that begin in it: the timed steps' own time, as
        throughput counts it, without the pauses between runs; a hiccup's window set aside."""
        windows: list[tuple[float, int, float]] = []  # (rate, samples, seconds)
        for start, end in zip(edges, edges[1:], strict=False):
            inside = [span for span in spans if start <= span.first < end]
            seconds = sum(span.seconds for span in inside)
            if seconds > 0:
                samples = samples_per_step * sum(span.steps for span in inside)
                windows.append((samples / seconds, samples, seconds))
        rates = [rate for rate, _, _ in windows]
        warming = still_warming(rates)
        set_aside = warming_windows(rates, warming) + tuple(
            replace(hiccup, window=hiccup.window + warming) for hiccup in outliers(rates[warming:])
        )
        kept = [w for index, w in enumerate(windows) if index not in {s.window for s in set_aside}]
        samples, seconds = sum(w[1] for w in kept), sum(w[2] for w in kept)
        if len(kept) < 2:
            return cls(rates, None, False, set_aside, samples, seconds, warming)
        kept_rates = [rate for rate, _, _ in kept]
        spread = (max(kept_rates) - min(kept_rates)) / statistics.median(kept_rates)
        return cls(rates, spread, spread > NOISY_SPREAD, set_aside, samples, seconds, warming)


def still_warming(rates: list[float]) -> int:
    """How many of the first windows ran before the step time settled (see MIN_WINDOWS_TO_SETTLE)."""
    if len(rates) < MIN_WINDOWS_TO_SETTLE:
        return 0
    settled = statistics.median(rates[len(rates) // 2 :])
    count = 0
    while count < len(rates) // 2 and rates[count] < settled * (1 - NOISY_SPREAD):
        count += 1
    return count


def warming_windows(rates: list[float], warming: int) -> tuple[SetAside, ...]:
    if not warming:
        return ()
    settled = statistics.median(rates[len(rates) // 2 :])
    return tuple(
        SetAside(i, rates[i], f"{1 - rates[i] / settled:.0%} below the later windows' median ({settled:,.0f}"
                 " samples/s): the step time had not settled yet, still warmup")
        for i in range(warming)
    )  # fmt: skip


def outliers(rates: list[float]) -> tuple[SetAside, ...]:
    """The windows a hiccup hit (see OUTLIER_SPREADS), furthest first, at most one in SET_ASIDE_SHARE."""
    if len(rates) < MIN_WINDOWS_TO_SET_ASIDE:
        return ()
    median = statistics.median(rates)
    robust = 1.4826 * statistics.median(abs(rate - median) for rate in rates)
    limit = max(OUTLIER_SPREADS * robust, NOISY_SPREAD * median)
    distance = [abs(rate - median) for rate in rates]
    far = sorted((i for i in range(len(rates)) if distance[i] > limit), key=lambda i: -distance[i])
    return tuple(
        SetAside(i, rates[i], f"{abs(rates[i] / median - 1):.0%} {'below' if rates[i] < median else 'above'} the"
                 f" median window ({median:,.0f} samples/s), beyond {OUTLIER_SPREADS:g} robust spreads: a hiccup")
        for i in sorted(far[: max(1, len(rates) // SET_ASIDE_SHARE)])
    )  # fmt: skip


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
    """The timed steps as runs of consecutive steps: work between two runs (an evaluation, a turn
    handed over) is in no span. `split()` ends a run; `skip()` counts a step trained outside the
    timer (a turn's first step, side by side), so that spans say which trained steps they hold;
    `spans` holds each run once the timer is read."""

    def __init__(self) -> None:
        self._trained: list[int] = []  # each timed step's place among the steps trained
        self._next = 0  # the place of the next step trained, timed or not
        self._breaks: set[int] = set()  # timed steps that begin a run
        self.spans: list[Span] = []

    @property
    def spans_s(self) -> list[float]:
        return [span.seconds for span in self.spans]

    @property
    def timed_steps(self) -> int:
        return len(self._trained)

    def split(self) -> None:
        self._breaks.add(len(self._trained))

    def skip(self) -> None:
        self._next += 1
        self.split()

    def _count(self) -> None:
        self._trained.append(self._next)
        self._next += 1

    def _runs(self) -> list[tuple[int, int]]:
        """(first, last) timed step of each run that has steps, counted among the timed steps."""
        edges = sorted({0, len(self._trained), *self._breaks})
        return [(first, end - 1) for first, end in zip(edges, edges[1:], strict=False) if end > first]

    def rate_since(self, first: int, samples_per_step: int) -> float | None:
        """Samples per second over the runs that began at trained step `first` or later (a window
        just ended: on a GPU its kernels have finished, so reading its events waits for nothing)."""
        runs = [(a, b) for a, b in self._runs() if self._trained[a] >= first]
        seconds = sum(self._run_seconds(a, b) for a, b in runs)
        steps = sum(b - a + 1 for a, b in runs)
        return samples_per_step * steps / seconds if seconds > 0 else None

    def _run_seconds(self, first: int, last: int) -> float:
        raise NotImplementedError

    def _spans(self, seconds: list[float]) -> list[Span]:
        """The runs as spans of trained steps, given each run's seconds."""
        runs = zip(self._runs(), seconds, strict=True)
        return [Span(self._trained[first], self._trained[last] + 1, span_s) for (first, last), span_s in runs]


class CpuStepTimer(_Segments):
    """Per-step wall times with perf_counter; the span runs from each run's first start to its last stop."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self._marks: list[tuple[float, float]] = []
        self._start = 0.0

    def __enter__(self) -> CpuStepTimer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._marks.append((self._start, time.perf_counter()))
        self._count()

    def _run_seconds(self, first: int, last: int) -> float:
        return self._marks[last][1] - self._marks[first][0]

    def read(self) -> tuple[list[float], float]:
        """(per-step milliseconds, the runs' spans in seconds, summed)."""
        marks = self._marks
        times = [(end - start) * 1e3 for start, end in marks]
        self.spans = self._spans([marks[last][1] - marks[first][0] for first, last in self._runs()])
        return times, sum(self.spans_s)


class CudaStepTimer(_Segments):
    """Per-step device times from CUDA event pairs; read() synchronises once."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self._events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)
        ]
        # torch creates a CUDA event at its first record: recorded once here, outside the timed
        # steps, each step's two records only enqueue (creating them in the steps cost an estimated
        # 20-40 us a step, 5-9% of a launch-bound MLP step).
        for pair in self._events:
            for event in pair:
                event.record()

    def __enter__(self) -> CudaStepTimer:
        self._events[self.timed_steps][0].record()
        return self

    def __exit__(self, *exc: object) -> None:
        self._events[self.timed_steps][1].record()
        self._count()

    def _run_seconds(self, first: int, last: int) -> float:
        return self._events[first][0].elapsed_time(self._events[last][1]) / 1e3

    def read(self) -> tuple[list[float], float]:
        used = self._events[: self.timed_steps]
        used[-1][1].synchronize()  # the one sync: wait for the last step to finish
        times = [start.elapsed_time(end) for start, end in used]
        # A span includes device idle time between steps (e.g. when launch-bound), which summing
        # per-step times would hide; throughput is computed from the spans.
        self.spans = self._spans([used[first][0].elapsed_time(used[last][1]) / 1e3 for first, last in self._runs()])
        return times, sum(self.spans_s)


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
