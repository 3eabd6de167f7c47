"""The host's cost per kernel (amp_suite.instruments.launches): host time only, the waits left out."""

from __future__ import annotations

import time

import pytest
import torch

from amp_suite.hardware.backends import backend_of
from amp_suite.instruments.launches import TIMED_KERNELS, host_cost_per_kernel, time_launches


class FakeDevice:
    """A host that takes `launch_us` to launch a kernel, in front of a device that takes `sync_s`
    to drain its queue: a clock both advance."""

    def __init__(self, launch_us: float, sync_s: float) -> None:
        self.now, self.launch_us, self.sync_s = 0.0, launch_us, sync_s
        self.launched, self.synced = 0, 0

    def clock(self) -> float:
        return self.now

    def launch(self) -> None:
        self.now += self.launch_us * 1e-6
        self.launched += 1

    def sync(self) -> None:
        self.now += self.sync_s
        self.synced += 1


def test_the_figure_is_the_hosts_time_per_launch_and_leaves_the_waits_for_the_device_out():
    slow_gpu = FakeDevice(launch_us=47.0, sync_s=0.5)  # the GPU's work would swamp the launches if it were counted
    assert time_launches(slow_gpu.launch, slow_gpu.sync, slow_gpu.clock, batches=4, per_batch=100) == pytest.approx(47)
    assert (slow_gpu.launched, slow_gpu.synced) == (400, 4)  # a sync after each batch: the queue never fills


def test_on_this_cpu_it_is_the_dispatch_cost_of_a_tiny_op_measured_well_under_a_second():
    started = time.perf_counter()
    cost = host_cost_per_kernel(backend_of("cpu"))
    assert time.perf_counter() - started < 1.0
    assert 0 < cost.us_per_kernel < 1000 and cost.kernels == TIMED_KERNELS >= 2000
    assert "dispatch" in cost.method and "CPU" in cost.method


def test_it_leaves_the_random_state_as_it_found_it():
    """A cell's seed decides its data: the probe before it must not draw."""
    torch.manual_seed(7)
    before = torch.get_rng_state()
    host_cost_per_kernel(backend_of("cpu"))
    assert torch.equal(torch.get_rng_state(), before)
