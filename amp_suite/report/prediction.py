"""Estimates held against what was published: each published speedup (report.references) beside
the one the roofline estimate implies for the same GPU, configurations and batches. No torch here.

Nothing is tuned to these figures: the estimate's inputs are the op profile, the datasheet and the
launch cost fixed beforehand, and its error on them is reported as it comes out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from amp_suite.analysis.roofline import CellEstimate
from amp_suite.report.references import PublishedSpeedup, same_config


@dataclass(frozen=True)
class Calibration:
    published: PublishedSpeedup
    estimated: float | None  # the same ratio of estimated throughputs; None where the matrix lacks a side
    why: str = ""  # where there is no estimate: what the matrix lacks

    @property
    def error(self) -> float | None:
        """estimated / published - 1: +0.20 is 20% above the published speedup."""
        return None if self.estimated is None else self.estimated / self.published.value - 1


def calibrate(estimates: Sequence[CellEstimate], published: Sequence[PublishedSpeedup], gpu: str) -> list[Calibration]:
    """Each published speedup on `gpu` (as the peak table names it) beside the estimate's."""
    found = []
    for speedup in published:
        if speedup.gpu.casefold() not in gpu.casefold() and gpu.casefold() not in speedup.gpu.casefold():
            continue
        mode = _side(estimates, speedup.precision, speedup.config)
        base = _side(estimates, speedup.baseline, speedup.baseline_config)
        if mode is None or base is None:
            missing = speedup.precision if mode is None else speedup.baseline
            found.append(Calibration(speedup, None, f"the matrix has no {missing} cell in this configuration"))
        else:
            found.append(Calibration(speedup, mode.samples_per_s / base.samples_per_s))
    return found


def mean_absolute_error(calibrations: Sequence[Calibration]) -> float | None:
    errors = [abs(c.error) for c in calibrations if c.error is not None]
    return statistics.fmean(errors) if errors else None


def _side(estimates: Sequence[CellEstimate], precision: str, wanted: dict) -> CellEstimate | None:
    return next(
        (e for e in estimates if e.precision == precision and e.batch == wanted.get("batch_size")
         and same_config(e.config, wanted)),
        None,
    )  # fmt: skip
