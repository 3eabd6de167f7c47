"""The GPU's own work per training step, measured where a slow host can't bend it.

A step's wall time is the slower of two things: the host launching the step's kernels, and the GPU
running them. CUDA events around a step time the wall, so they can't tell the two apart, and neither
can the host's CPU time (a host waiting in `synchronize` spins: a GPU-bound step shows as much host
time as a host-bound one). What can is the device's own timeline: CUPTI records when each kernel,
copy and fill started and ended on the GPU, and their union over a step is the time the GPU was
busy, however slowly the host fed it.

Method: torch.profiler (CUPTI) traces the last PROFILED_STEPS warmup steps, in the cell's own turn
(side by side, the warmup steps kept back for the first round of turns), never a step's first: it
compiles, tunes cuDNN and fills the optimizer's state. The traced steps are ordinary warmup steps, so
nothing extra trains and no timed step runs under the profiler; what it costs is the profiler's
start (about a second, once per cell) and its slower launches in those steps, both in `warmup_s`.
The record then holds the busy time per step, and the share of the timed step the GPU sat idle
(against the timed steps' own mean, the step throughput counts).

`trace` and `supported` are module attributes so that a stand-in can replace them:
scripts/simulated_stream runs a simulated stream behind a slow host on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from amp_suite.instruments import LiveDevice

PROFILED_STEPS = 3
# What CUPTI records on the device's timeline: kernels, copies and fills. Not the GPU-side mirror of
# record_function ranges ("gpu_user_annotation"), which spans the work it names, idle gaps included.
DEVICE_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


@dataclass(frozen=True)
class DeviceSpan:
    """One piece of work on the device's timeline."""

    start_ns: int
    end_ns: int


def busy_ns(spans: Iterable[DeviceSpan]) -> int:
    """How long the device was doing something: the union of the spans (work on two streams at once
    counts once)."""
    total, reach = 0, None
    for span in sorted(spans, key=lambda s: s.start_ns):
        if reach is None or span.start_ns >= reach:
            total += span.end_ns - span.start_ns
            reach = span.end_ns
        elif span.end_ns > reach:
            total += span.end_ns - reach
            reach = span.end_ns
    return total


def device_spans(events: Iterable[Any]) -> list[DeviceSpan]:
    """The device's work among a trace's events (torch's `_KinetoEvent`s: host ops, runtime calls and
    annotations are the host's)."""
    return [
        DeviceSpan(event.start_ns(), event.start_ns() + event.duration_ns())
        for event in events
        if event.activity_type() in DEVICE_ACTIVITIES
    ]


@contextmanager
def cuda_trace(device: torch.device) -> Iterator[Callable[[], list[DeviceSpan]]]:
    """CUPTI over the block; yields a reader of the device's spans, valid once the block has ended."""
    from torch.profiler import ProfilerActivity, profile

    found: list[DeviceSpan] = []
    with profile(activities=[ProfilerActivity.CUDA]) as traced:
        yield lambda: found
        torch.cuda.synchronize(device)  # the last kernels land in the trace
    try:
        found.extend(device_spans(traced.profiler.kineto_results.events()))
    except (AttributeError, RuntimeError) as error:  # another torch's kineto: the steps trained; no figure
        print(f"GPU work: the trace could not be read ({type(error).__name__}: {error}): not measured", flush=True)


def supported(device: LiveDevice) -> bool:
    """A timeline of kernels to read: a GPU's (a CPU's ops run on the host that launches them)."""
    return not device.is_host


trace = cuda_trace


@dataclass
class GpuWork:
    """The busy time per step of the steps traced, once `run` has traced some."""

    device: LiveDevice
    busy_ms_per_step: float | None = None
    steps: int = 0

    def run(self, train: Callable[[int], Any], steps: int) -> list[Any]:
        """`train(n)` for `steps` steps in all, the last PROFILED_STEPS of them (never the first)
        traced where the device has a timeline to read; each call's result, in order."""
        traced = min(PROFILED_STEPS, steps - 1) if supported(self.device) else 0
        if traced < 1:
            return [train(steps)]
        first = train(steps - traced)
        with trace(self.device.device) as spans:
            last = train(traced)
        found = spans()
        if not found:  # no kernel in the trace: CUPTI saw nothing (unavailable, or taken), which is no idle GPU
            print(f"GPU work: the trace of {traced} steps holds no kernel: not measured", flush=True)
            return [first, last]
        self.busy_ms_per_step = busy_ns(found) / 1e6 / traced
        self.steps = traced
        return [first, last]

    def fields(self, step_ms: float) -> dict[str, float | int | None]:
        """The record's fields, against the timed steps' mean step (`step_ms`)."""
        if self.busy_ms_per_step is None:
            return {}
        idle = max(0.0, 1.0 - self.busy_ms_per_step / step_ms)  # profiled steps can run a hair slower
        return {"gpu_busy_ms_per_step": self.busy_ms_per_step, "gpu_idle_fraction": idle}
