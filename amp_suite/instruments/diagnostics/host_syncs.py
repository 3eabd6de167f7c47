"""How often a training step makes the host wait for the device.

A GPU step should only queue work. Reading a device value on the host (`.item()`, `bool()`)
stalls that queue until the device has caught up, and a launch-bound model pays for every stall.
The AMP recipe has one by design: GradScaler.step reads whether any gradient overflowed before it
decides to step, so every fp16 step synchronises once. That is part of fp16's real cost, so it is
counted and recorded (`host_syncs_per_step`), not hidden.

The count comes from one warmup step, outside the timed region. On a GPU, CUDA's sync-debug mode
flags every synchronising call, torch's internal ones included. A CPU has no device to wait for,
so the count there is of the reads that would synchronise on a GPU: `Tensor.item`, `.tolist` and
`bool()` on any tensor except the optimizer's step counters, which torch keeps on the host by
design (reading them costs no sync on a GPU either).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import torch

from amp_suite.instruments import LiveDevice

_HOST_READS = ("item", "tolist", "__bool__")


@dataclass
class SyncCount:
    count: int = 0


def count_host_syncs(device: LiveDevice, optimizer: torch.optim.Optimizer) -> AbstractContextManager[SyncCount]:
    """The count over the block, as `device`'s backend counts it (count_cuda_syncs, count_host_reads)."""
    return device.host_syncs(optimizer)


@contextmanager
def count_cuda_syncs() -> Iterator[SyncCount]:
    """Every synchronising CUDA call in the block, as CUDA's sync-debug mode flags it."""
    counter = SyncCount()
    saved = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield counter
        finally:
            torch.cuda.set_sync_debug_mode(saved)
    counter.count = sum("synchronizing CUDA operation" in str(warning.message) for warning in caught)


@contextmanager
def count_host_reads(optimizer: torch.optim.Optimizer) -> Iterator[SyncCount]:
    """The reads in the block that would synchronise on a GPU, but of the optimizer's step counters,
    looked up when each read happens: an optimizer makes them in its first step, so a count that
    starts before it would miss them."""
    counter = SyncCount()
    exempt: Callable[[], set[int]] = lambda: _step_counters(optimizer)  # noqa: E731
    originals = {name: getattr(torch.Tensor, name) for name in _HOST_READS}

    def counted(name: str):
        original = originals[name]

        def read(tensor: torch.Tensor, *args, **kwargs):
            if id(tensor) not in exempt():
                counter.count += 1
            return original(tensor, *args, **kwargs)

        return read

    try:
        for name in _HOST_READS:
            setattr(torch.Tensor, name, counted(name))
        yield counter
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def _step_counters(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(state["step"]) for state in optimizer.state.values() if torch.is_tensor(state.get("step"))}
