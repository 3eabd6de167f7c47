"""`batch_sizes: [auto]`: the largest batch that fits, found per precision by probing.

Each probe is a short run of the cell itself (diagnostics, the cell's own warmup steps, two timed
steps, evaluation) in a fresh process, so "fits" means the cell as measured fits, and one probe's
allocator state can't help or hurt the next. The whole warmup, not one step: the caching
allocator's blocks fragment over the first steps, and on an H200 capped at 2 GiB a GPT-2-shaped
model that fitted batch 13 for three steps ran out of memory at batch 13 on its tenth (52 MiB
asked, 75 MiB cached in pieces). The search doubles from a small batch until one does not fit (status
`oom`) or the training set caps it (the workload's `samples`, or fewer where real data has fewer:
the first probe that runs reports the size), then bisects between the last fit and the first
failure until they are within 1/16 of each other. The cell is then measured at the batch found.
A probe that is skipped (the device can't run this precision at all) skips the cell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from amp_suite.config import CellSpec
from amp_suite.config.base import DIVERGED, OK, OOM, SKIPPED
from amp_suite.hardware.backends import backend_named
from amp_suite.records.results import BatchSearch, CellRecord

START = 8  # the first probe; halved down to 1 if even this does not fit
PRECISION = 16  # stop bisecting when the gap is under 1/16 of the batch that fits
PROBE_STEPS = 2  # timed; the warmup is the cell's own

Probe = Callable[[CellSpec], CellRecord]  # runs a cell in a fresh process


def unsupported_reason(device: str) -> str | None:
    """Why the search can't run on this device, or None."""
    if backend_named(device).reports_oom:  # a probe too large fails as a record, not a killed process
        return None
    return (
        "batch_sizes auto needs a device that reports running out of memory (CUDA); on a CPU the kernel's"
        " OOM killer would end the probe, or another process"
    )


def search_batch(spec: CellSpec, limit: int, probe: Probe) -> BatchSearch:
    """The largest batch up to `limit` (the workload's samples; less if the training set is smaller)
    at which `spec` runs."""
    probes = _Probes(spec, probe, limit)
    batch = min(START, limit)
    while (answer := probes.fits(batch)) is False and batch > 1:  # even the start is too big: halve
        batch //= 2
    if not answer:
        return probes.result(None, None)
    good, bad = batch, None
    while bad is None and good < probes.limit:
        trial = min(good * 2, probes.limit)
        answer = probes.fits(trial)
        if answer is None:
            return probes.result(good, None)
        good, bad = (trial, None) if answer else (good, trial)
    while bad is not None and bad - good > max(1, good // PRECISION):
        middle = (good + bad) // 2
        answer = probes.fits(middle)
        if answer is None:
            break
        good, bad = (middle, bad) if answer else (good, middle)
    return probes.result(good, "memory" if bad is not None else "samples")


class _Probes:
    def __init__(self, spec: CellSpec, probe: Probe, limit: int) -> None:
        self.spec, self.probe = spec, probe
        self.limit = limit  # the largest batch the training set allows
        self.tried: list[tuple[int, str]] = []
        self.failure: str | None = None
        self.skipped: str | None = None

    def fits(self, batch: int) -> bool | None:
        """True, False (out of memory), or None when the probe was skipped or failed otherwise."""
        short = {"batch_size": batch, "steps": PROBE_STEPS}
        record = self.probe(self.spec.model_copy(update=short))
        self.tried.append((batch, record.status))
        if record.status in (OK, DIVERGED):  # diverged: it ran, so it fitted
            # `samples` only caps real data (digits has 1,437 training samples): a batch can't be larger.
            self.limit = min(self.limit, record.train_samples or self.limit)
            return True
        if record.status == OOM:
            return False
        if record.status == SKIPPED:  # the device can't run this cell at any batch (bf16 on a V100)
            self.skipped = record.reason or "skipped, no reason recorded"
        else:
            self.failure = f"probe at batch {batch}: {record.status}: {record.reason or 'no reason recorded'}"
        return None

    def result(self, found: int | None, limited_by: Literal["memory", "samples"] | None) -> BatchSearch:
        return BatchSearch(
            found=found, limited_by=limited_by, probes=self.tried, failure=self.failure, skipped=self.skipped
        )
