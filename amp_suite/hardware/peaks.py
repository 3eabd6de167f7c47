"""Published dense peak throughput per GPU and math mode, for model-FLOPs utilisation. No torch.

The table is data with its sources (amp_suite/references/peaks/gpu-peaks.yaml, NVIDIA datasheets).
A GPU it does not list gets no MFU: a guessed peak would make the fraction meaningless.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from amp_suite.config.precisions import MODE_BY_NAME

PEAKS_FILE = Path(__file__).resolve().parent.parent / "references" / "peaks" / "gpu-peaks.yaml"


@functools.cache
def _table() -> tuple[tuple[str, dict[str, float | None]], ...]:
    data = yaml.safe_load(PEAKS_FILE.read_text(encoding="utf-8"))
    return tuple((entry["match"].casefold(), entry["peak_tflops"]) for entry in data["gpus"])


def peak_tflops(device_name: str, precision: str) -> float | None:
    """The dense peak for this GPU and precision, or None where the table has none."""
    name = device_name.casefold()
    mode = MODE_BY_NAME[precision].math if precision in MODE_BY_NAME else None
    for match, peaks in _table():
        if match in name:
            value = peaks.get(mode) if mode else None
            return float(value) if value else None
    return None


def utilisation(
    device_type: str, device_name: str, precision: str, tflops: float | None, devices: int = 1
) -> dict[str, float | None]:
    """The record's `peak_tflops` (one GPU's) and `mfu`; both None off a known GPU. `tflops` is
    what the cell achieved on all its `devices` together (a DDP cell: its world size), so MFU is
    achieved / (peak x devices): a fraction of what those GPUs could do, at most 1."""
    peak = peak_tflops(device_name, precision) if device_type == "cuda" else None
    mfu = tflops / (peak * devices) if peak and tflops is not None else None
    return {"peak_tflops": peak, "mfu": mfu}
