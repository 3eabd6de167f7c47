"""Published dense peak throughput per GPU and math mode, for model-FLOPs utilisation. No torch.

The table is data with its sources (amp_suite/references/peaks/gpu-peaks.yaml, NVIDIA datasheets).
A GPU it does not list gets no MFU: a guessed peak would make the fraction meaningless.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from amp_suite.config.precisions import MODE_BY_NAME

PEAKS_FILE = Path(__file__).resolve().parent.parent / "references" / "peaks" / "gpu-peaks.yaml"


@dataclass(frozen=True)
class GpuSpec:
    """What a roofline estimate needs of a GPU: its peaks per math mode, its memory bandwidth, the
    host time of a kernel launch (one figure for every GPU: the table's launch_us), and its compute
    capability (which modes run there)."""

    name: str
    peak_tflops: dict[str, float | None]  # math mode (fp32, tf32, fp16, bf16, fp8) -> dense TFLOP/s
    memory_gbps: float
    launch_us: float
    capability: tuple[int, int]


@functools.cache
def _data() -> dict:
    return yaml.safe_load(PEAKS_FILE.read_text(encoding="utf-8"))


@functools.cache
def _table() -> tuple[tuple[str, dict], ...]:
    """Each entry by its match string, casefolded once."""
    return tuple((entry["match"].casefold(), entry) for entry in _data()["gpus"])


def _entry(device_name: str) -> dict | None:
    """The first entry whose `match` the name contains (more specific entries come first)."""
    name = device_name.casefold()
    return next((entry for match, entry in _table() if match in name), None)


def peak_tflops(device_name: str, precision: str) -> float | None:
    """The dense peak for this GPU and precision, or None where the table has none."""
    entry = _entry(device_name)
    mode = MODE_BY_NAME[precision].math if precision in MODE_BY_NAME else None
    value = entry["peak_tflops"].get(mode) if entry and mode else None
    return float(value) if value else None


def gpu_spec(device_name: str) -> GpuSpec | None:
    """The GPU's peaks, bandwidth and launch cost; None where the table has no bandwidth for it."""
    entry = _entry(device_name)
    if entry is None or not entry.get("memory_gbps"):
        return None
    major, minor = (int(part) for part in str(entry["capability"]).split("."))
    launch_us = float(_data()["launch_us"])
    return GpuSpec(entry["name"], dict(entry["peak_tflops"]), float(entry["memory_gbps"]), launch_us, (major, minor))


def estimated_gpus() -> list[str]:
    """The match names of the GPUs a roofline estimate can be made for, one per product (first spelling)."""
    named: dict[str, str] = {}
    for entry in _data()["gpus"]:
        if entry.get("memory_gbps"):
            named.setdefault(entry["name"], entry["match"])
    return list(named.values())


def utilisation(
    device_type: str, device_name: str, precision: str, tflops: float | None, devices: int = 1
) -> dict[str, float | None]:
    """The record's `peak_tflops` (one GPU's) and `mfu`; both None off a known GPU. `tflops` is
    what the cell achieved on all its `devices` together (a DDP cell: its world size), so MFU is
    achieved / (peak x devices): a fraction of what those GPUs could do, at most 1."""
    peak = peak_tflops(device_name, precision) if device_type == "cuda" else None
    mfu = tflops / (peak * devices) if peak and tflops is not None else None
    return {"peak_tflops": peak, "mfu": mfu}
