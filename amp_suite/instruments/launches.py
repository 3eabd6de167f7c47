"""The host's cost per kernel: how long this machine's host takes to hand the device one eager
PyTorch op, timed over a few thousand tiny ones. `amp-suite doctor` shows it, every record's
machine keeps it (records.machine.Machine.host_us_per_kernel), and `amp-suite predict` sets a
step's host side against its GPU side with it (analysis.roofline).

On CUDA it is the host's time to enqueue a kernel: batches of tiny additions, each batch timed on
the host with nothing waited for, then one synchronize outside the timed part. A batch is well
under the driver's launch queue (about a thousand pending launches), so the host never waits on a
full queue and the figure is the host's alone, however slow the GPU. On a CPU there is no queue:
an op runs where it is called, so the figure is its dispatch cost (the Python binding, the
dispatcher, the allocator and an 8-element addition).

It is a floor for a training step's kernels: a step's ops come through modules, autograd and an
optimizer, which add host time per kernel on top (the suite's MLP on a cloud H200 VM took 47 us
a kernel over its whole step). It costs about 3,000 launches: 15 ms on a good host, 150 ms at
47 us, and runs when a cell probes its device, before its first step (never in a timed region).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from amp_suite.instruments import LiveDevice

KERNELS_PER_BATCH = 256  # far below CUDA's ~1,024-entry launch queue: the host never blocks on it
BATCHES = 12
TIMED_KERNELS = BATCHES * KERNELS_PER_BATCH  # 3,072
WARMUP_BATCHES = 2  # the first launches load the kernel's module and fill the allocator's cache
ELEMENTS = 8  # a tensor small enough that the device's work is nothing beside the launch


@dataclass(frozen=True)
class LaunchCost:
    """The host's time per kernel, how many kernels it was timed over, and what it measures there."""

    us_per_kernel: float
    kernels: int
    method: str


def time_launches(
    launch: Callable[[], object],
    sync: Callable[[], object],
    clock: Callable[[], float] = time.perf_counter,
    batches: int = BATCHES,
    per_batch: int = KERNELS_PER_BATCH,
) -> float:
    """Microseconds of host time per `launch()`, over `batches` x `per_batch` of them; each batch
    ends with `sync()`, which is not timed: it empties the queue before the next batch."""
    host_seconds = 0.0
    for _ in range(batches):
        start = clock()
        for _ in range(per_batch):
            launch()
        host_seconds += clock() - start
        sync()
    return host_seconds / (batches * per_batch) * 1e6


def host_cost_per_kernel(device: LiveDevice) -> LaunchCost:
    """The host's time per tiny eager op on `device`. Touches no random state (the cell's seed
    decides its data), and hands a GPU's cached blocks back, so the cell's memory figures don't
    count them."""
    us = _time_tiny_additions(device)
    device.release_cached_blocks()  # the tensors are gone with the call above: their blocks go back to the driver
    return LaunchCost(us, TIMED_KERNELS, method_on(device))


def method_on(device: LiveDevice) -> str:
    """What the figure is on this kind of device, in words."""
    return device.launch_method.format(per_batch=KERNELS_PER_BATCH)


def _time_tiny_additions(device: LiveDevice) -> float:
    left, right = torch.ones(ELEMENTS, device=device.device), torch.ones(ELEMENTS, device=device.device)
    sync = device.synchronize

    def launch() -> torch.Tensor:
        return torch.add(left, right)  # out of place, as most training ops: the allocator's round trip is in it

    with torch.no_grad():
        time_launches(launch, sync, batches=WARMUP_BATCHES)
        return time_launches(launch, sync)
