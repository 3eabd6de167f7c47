"""The GPU's own work per step (instruments.diagnostics.gpu_work): the union of the device's spans,
read from a trace's events, over the last warmup steps, never a step's first."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import torch

from amp_suite.hardware.backends import backend_of
from amp_suite.hardware.backends.cuda import CudaBackend
from amp_suite.instruments.diagnostics import gpu_work
from amp_suite.instruments.diagnostics.gpu_work import DeviceSpan, GpuWork, busy_ns, device_spans


def test_busy_time_is_the_union_of_the_spans_overlaps_counted_once():
    spans = [DeviceSpan(0, 10), DeviceSpan(5, 12), DeviceSpan(20, 25), DeviceSpan(21, 22), DeviceSpan(30, 30)]
    assert busy_ns(spans) == 12 + 5
    assert busy_ns([]) == 0


@dataclass
class Event:
    """A `_KinetoEvent`'s face: what device_spans reads."""

    kind: str
    start: int
    duration: int

    def activity_type(self) -> str:
        return self.kind

    def start_ns(self) -> int:
        return self.start

    def duration_ns(self) -> int:
        return self.duration


def test_only_the_devices_own_work_counts_not_the_hosts_calls_nor_annotations_spanning_gaps():
    events = [
        Event("cpu_op", 0, 1000),  # the host's op, launching
        Event("cuda_runtime", 0, 30),  # cudaLaunchKernel
        Event("gpu_user_annotation", 0, 10_000),  # a record_function range mirrored on the GPU: gaps too
        Event("kernel", 100, 50),
        Event("gpu_memcpy", 200, 20),
        Event("gpu_memset", 300, 5),
    ]
    assert device_spans(events) == [DeviceSpan(100, 150), DeviceSpan(200, 220), DeviceSpan(300, 305)]


def simulated_stream(launch_ns: int, kernel_ns: int, kernels_per_step: int):
    """A stream behind a host that launches a kernel every `launch_ns`; each kernel takes `kernel_ns`
    and starts when launched or when the one before it ends. Returns the trace and each step's time as
    CUDA events give it: from the start event, which fires once launched and the stream is free, to
    the end event after the step's last kernel."""
    clock = {"host": 0, "device": 0, "steps": []}

    def train(steps: int) -> int:
        for _ in range(steps):
            start = max(clock["host"], clock["device"])
            for _ in range(kernels_per_step):
                clock["host"] += launch_ns
                begin = max(clock["host"], clock["device"])
                clock["device"] = begin + kernel_ns
                if spans is not None:
                    spans.append(DeviceSpan(begin, begin + kernel_ns))
            clock["steps"].append(clock["device"] - start)
        return steps

    spans: list[DeviceSpan] | None = None

    @contextmanager
    def trace(device):
        nonlocal spans
        spans = []
        found: list[DeviceSpan] = []
        yield lambda: found
        found.extend(spans)
        spans = None

    return train, trace, clock


@pytest.mark.parametrize(
    ("launch_ns", "kernel_ns", "idle"),
    [(47_000, 5_000, 0.89), (5_000, 100_000, 0.0)],  # the H200 lease's host; a host that keeps up
    ids=["host-bound", "gpu-bound"],
)
def test_the_method_separates_a_slow_host_from_a_busy_gpu(monkeypatch, launch_ns, kernel_ns, idle):
    train, trace, clock = simulated_stream(launch_ns, kernel_ns, kernels_per_step=40)
    monkeypatch.setattr(gpu_work, "trace", trace)
    monkeypatch.setattr(gpu_work, "supported", lambda device: True)
    work = GpuWork(backend_of("cpu"))
    assert work.run(train, 10) == [7, 3]  # the last three steps traced, the first seven not
    step_ms = clock["steps"][-1] / 1e6
    assert work.busy_ms_per_step == pytest.approx(40 * kernel_ns / 1e6)
    assert work.fields(step_ms)["gpu_idle_fraction"] == pytest.approx(idle, abs=0.01)


def test_nothing_is_traced_off_a_gpu_nor_in_a_steps_first():
    work = GpuWork(backend_of("cpu"))
    assert work.run(lambda n: n, 5) == [5] and work.fields(1.0) == {}
    work.device = CudaBackend(torch.device("cuda"))
    assert work.run(lambda n: n, 1) == [1]


def test_a_trace_without_a_kernel_measures_nothing_rather_than_an_idle_gpu(monkeypatch, capsys):
    """CUPTI unavailable (or held by another profiler) gives a trace with no device event: that is no
    measurement, never a GPU idle all the step."""

    @contextmanager
    def empty(device):
        yield lambda: []

    monkeypatch.setattr(gpu_work, "trace", empty)
    monkeypatch.setattr(gpu_work, "supported", lambda device: True)
    work = GpuWork(backend_of("cpu"))
    assert work.run(lambda n: n, 6) == [3, 3]
    assert work.busy_ms_per_step is None and work.fields(10.0) == {}
    assert "holds no kernel: not measured" in capsys.readouterr().out
