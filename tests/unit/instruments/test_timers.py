from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from amp_suite.hardware.backends import backend_of
from amp_suite.hardware.backends.cuda import CudaBackend
from amp_suite.instruments import TimedRegion, instrumented, region_instrument
from amp_suite.instruments.memory import PeakMemory
from amp_suite.instruments.timers import CpuStepTimer, CudaStepTimer, HostCpuTime, step_stats
from amp_suite.records.results import CellRecord
from amp_suite.records.schema import fields_of, instruments_of


def test_step_stats_percentiles():
    stats = step_stats([float(v) for v in range(1, 11)])
    assert stats.p50_ms == 5.5
    assert stats.p90_ms == pytest.approx(9.1)
    assert stats.mean_ms == 5.5
    assert stats.stdev_ms == pytest.approx(3.0277, rel=1e-3)
    assert step_stats([4.0]).p90_ms == 4.0
    with pytest.raises(ValueError):
        step_stats([])


def test_cpu_timer_times_each_step_and_the_span():
    timer = CpuStepTimer(3)
    for duration in (0.01, 0.03, 0.02):
        with timer:
            time.sleep(duration)
        time.sleep(0.01)  # between steps: in the span, not in a step
    times, span = timer.read()
    assert len(times) == 3
    assert times[1] > times[0] and times[1] > times[2]
    assert 0.01 * 1e3 <= times[0] < 0.01 * 1e3 + 15
    assert span >= sum(times) / 1e3 + 0.02


def test_a_split_leaves_the_work_between_runs_of_steps_out_of_the_span():
    """Time to target evaluates between runs of timed steps: that work is in no span, so not in throughput."""
    timer = CpuStepTimer(4)
    for step in range(4):
        if step == 2:
            timer.split()
            time.sleep(0.3)  # an evaluation
        with timer:
            time.sleep(0.01)
    times, span = timer.read()
    assert len(times) == 4 and len(timer.spans_s) == 2 and span == pytest.approx(sum(timer.spans_s))
    assert sum(times) / 1e3 <= span < 0.3


def test_host_cpu_time_leaves_a_paused_stretch_out():
    with HostCpuTime() as timed:
        with timed.paused():  # an evaluation's CPU work
            end = time.process_time() + 0.2
            while time.process_time() < end:
                pass
    assert timed.seconds < 0.05


def test_host_cpu_time_counts_work_not_waiting_and_logs_its_bounds(capsys):
    with HostCpuTime() as waiting:
        time.sleep(0.2)
    with HostCpuTime() as working:  # 0.2 s of this process's CPU, however long a busy machine takes to give it
        end = time.process_time() + 0.2
        while time.process_time() < end:
            pass
    assert waiting.seconds < 0.05 < 0.1 < working.seconds
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" at ")[0] for line in lines] == ["timed steps: begin", "timed steps: end"] * 2
    begin, end = (float(line.rsplit(" ", 1)[1]) for line in lines[:2])  # the sleep's: 0.2 s, however busy
    assert 0.2 <= end - begin < 1.0  # monotonic seconds, the clock a benchmark beside the cell shares


PEAK_PROBE = """
import torch
from amp_suite.hardware.backends import backend_of
from amp_suite.instruments.memory import PeakMemory
with PeakMemory(backend_of("cpu")) as small:
    torch.ones(1)
with PeakMemory(backend_of("cpu")) as large:
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB
    block.add_(1)
print(small.peak_mb, large.peak_mb, large.kind)
"""


def test_cpu_peak_memory_sees_a_large_allocation():
    # A fresh process, as each cell gets: in a long-lived one, freed but still resident memory
    # can absorb the allocation without raising the resident set at all.
    done = subprocess.run([sys.executable, "-c", PEAK_PROBE], capture_output=True, text=True, check=True)
    small, large, kind = done.stdout.split()
    assert float(large) - float(small) > 32
    assert kind == "cpu_peak_rss"


@pytest.mark.gpu
def test_cuda_timer_and_memory(gpu):
    device = torch.device("cuda")
    a = torch.randn(2048, 2048, device=device)
    timer = CudaStepTimer(2)
    with PeakMemory(backend_of(device)) as memory:
        for _ in range(2):
            with timer:
                (a @ a).sum()
        times, span = timer.read()
    assert len(times) == 2 and all(t > 0 for t in times) and span * 1e3 >= sum(times) * 0.99
    assert memory.peak_mb >= 16 and memory.reserved_mb >= memory.peak_mb


def test_throughput_spread_across_windows_flags_a_noisy_cell():
    from amp_suite.config.base import window_edges
    from amp_suite.instruments.timers import Span, Spread

    edges = window_edges(60)
    assert edges == [0, 10, 20, 30, 40, 50, 60]
    steady = Spread.of([Span(start, start + 10, 0.1) for start in edges[:-1]], edges, samples_per_step=32)
    assert len(steady.windows) == 6 and steady.windows[0] == pytest.approx(3200.0)
    assert steady.spread == pytest.approx(0.0) and not steady.noisy
    # Two windows ran at half speed; side by side, each window's first step is not timed (9 steps).
    slowed = [Span(start + 1, start + 10, 0.09 if start < 40 else 0.18) for start in edges[:-1]]
    spread = Spread.of(slowed, edges, samples_per_step=32)
    assert spread.windows[0] == pytest.approx(3200.0) and spread.windows[-1] == pytest.approx(1600.0)
    # One of six may be a hiccup's, set aside: the other stays, and the cell is noisy.
    assert len(spread.set_aside) == 1 and spread.spread == pytest.approx(0.5) and spread.noisy
    assert Spread.of([Span(0, 1, 0.01)], window_edges(1), 32).spread is None  # one window: no spread


def test_one_window_a_hiccup_hit_is_set_aside_with_why_and_the_cell_is_not_noisy():
    """The smoke run's MLP: five windows near 29,000 samples/s and one at 16,988. That window is left
    out of the throughput and the spread, and listed; the figures are the other five's."""
    from amp_suite.config.base import window_edges
    from amp_suite.instruments.timers import Span, Spread

    edges = window_edges(60)
    rates = [29_000.0, 29_400.0, 28_700.0, 16_988.0, 29_100.0, 28_900.0]
    spans = [Span(start, start + 10, 320 / rate) for start, rate in zip(edges, rates, strict=False)]
    spread = Spread.of(spans, edges, samples_per_step=32)
    (aside,) = spread.set_aside
    assert aside.window == 3 and aside.samples_per_s == pytest.approx(16_988.0)
    assert aside.reason.startswith("41% below the median window (28,950 samples/s)")
    assert not spread.noisy and spread.spread == pytest.approx(700 / 29_000)
    kept = rates[:3] + rates[4:]
    assert spread.samples == 5 * 320 and spread.samples / spread.seconds == pytest.approx(5 / sum(1 / r for r in kept))
    quiet = Spread.of(spans[:3] + [Span(30, 40, 320 / 27_000.0)] + spans[4:], edges, 32)  # 7% off: no hiccup
    assert quiet.set_aside == () and not quiet.noisy


def test_windows_hold_two_steps_at_least_and_split_the_steps_evenly():
    from amp_suite.config.base import window_edges

    assert window_edges(7) == [0, 2, 5, 7] and window_edges(1) == [0, 1] and window_edges(100)[1] == 17


class FakeCachingAllocator:
    """CUDA's caching allocator as torch.cuda reports it: freed blocks stay reserved (cached)
    until empty_cache, later allocations reuse the cache first, and resetting the peak sets the
    reserved peak to what is reserved at that moment."""

    def __init__(self, monkeypatch) -> None:
        self.in_use = self.cached = self.peak_reserved = 0
        for name in ("empty_cache", "reset_peak_memory_stats", "max_memory_reserved", "max_memory_allocated"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))

    @property
    def reserved(self) -> int:
        return self.in_use + self.cached

    def allocate(self, size: int) -> None:
        reused = min(size, self.cached)
        self.cached -= reused
        self.in_use += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, size: int) -> None:
        self.in_use -= size
        self.cached += size

    def empty_cache(self) -> None:
        self.cached = 0

    def reset_peak_memory_stats(self, device=None) -> None:
        self.peak_reserved = self.reserved

    def max_memory_reserved(self, device=None) -> int:
        return self.peak_reserved

    def max_memory_allocated(self, device=None) -> int:
        return self.in_use


@pytest.mark.parametrize("released, reserved_mb", [(True, 2048), (False, 6144)])
def test_the_reserved_peak_is_the_trainings_own_only_when_the_diagnostics_cache_is_released(
    monkeypatch, released, reserved_mb
):
    allocator, mb = FakeCachingAllocator(monkeypatch), 2**20
    cuda = CudaBackend(torch.device("cuda", 0))
    allocator.allocate(6144 * mb)  # the diagnostics' fp32 backward and model copies
    allocator.free(6144 * mb)
    if released:
        cuda.release_cached_blocks()
    allocator.allocate(2048 * mb)  # warmup: the training's working set
    with PeakMemory(cuda) as memory:
        allocator.free(512 * mb)  # the timed steps reuse it
        allocator.allocate(512 * mb)
    assert memory.reserved_mb == reserved_mb


def test_the_timed_region_enters_every_instrument_the_schema_names_and_each_fills_exactly_its_fields():
    """A new measured quantity is its instrument plus its field: the pipeline finds the instrument
    through the field's declaration, so an instrument that filled a field the schema gives to
    another (or left one of its own out) would put a wrong figure in every record."""
    names = instruments_of(CellRecord)
    assert {"memory", "gpu_state"} <= set(names)
    with instrumented(backend_of("cpu")) as readings:
        torch.ones(1024).sum()
    assert [type(i) for i in readings.instruments] == [region_instrument(name) for name in names]
    for name, instrument in zip(names, readings.instruments, strict=True):
        filled = instrument.fields(TimedRegion(steps=4, batch_size=8))
        assert set(filled) == set(fields_of(CellRecord, instrument=name)), name
    fields = readings.fields(TimedRegion(steps=4, batch_size=8))
    assert fields["peak_memory_kind"].startswith("cpu_peak_rss") and fields["peak_memory_mb"] > 0
    assert fields["energy_j"] is None  # a CPU: no NVML readings, not zeros


def test_first_windows_whose_step_time_had_not_settled_are_set_aside_as_warmup_at_most_half():
    """A ViT's by-name run on a CPU: its first timed window at 21.6 images/s, the rest near 210.
    That window is warmup the fixed count did not cover: left out of throughput and listed, and the
    figures are the settled windows'. A cell slow from start to end is never cut to its faster half."""
    from amp_suite.config.base import window_edges
    from amp_suite.instruments.timers import Span, Spread

    edges = window_edges(12)
    rates = [21.6, 205.0, 212.0, 208.0, 211.0, 209.0]
    spans = [Span(start, start + 2, 32 / rate) for start, rate in zip(edges, rates, strict=False)]
    spread = Spread.of(spans, edges, samples_per_step=16)
    (aside,) = spread.set_aside
    assert (spread.warming, aside.window) == (1, 0) and "had not settled yet" in aside.reason
    assert spread.samples / spread.seconds == pytest.approx(5 / sum(1 / r for r in rates[1:]))
    assert not spread.noisy
    slowing_down = [210.0, 150.0, 100.0, 60.0, 40.0, 30.0]  # later windows slower: not warmup
    spans = [Span(start, start + 2, 32 / rate) for start, rate in zip(edges, slowing_down, strict=False)]
    assert Spread.of(spans, edges, 16).warming == 0
    ramping = [10.0, 20.0, 40.0, 80.0, 200.0, 200.0]  # never settled within the cap: half set aside, no more
    spans = [Span(start, start + 2, 32 / rate) for start, rate in zip(edges, ramping, strict=False)]
    assert Spread.of(spans, edges, 16).warming == 3
