"""Probe the live device: its name, compute capability or CPU flags, turned into DeviceCaps
by the article's capability rule (amp_suite.records.machine, pure and torch-free)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from amp_suite.records.machine import DeviceCaps, cpu_caps, cuda_caps


def probe(device: torch.device) -> DeviceCaps:
    """Capabilities of the device a cell will run on. Initialises CUDA when asked about it."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return cuda_caps(torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index))
    name, flags = _cpuinfo()
    return cpu_caps(name, flags)


def _cpuinfo() -> tuple[str, frozenset[str]]:
    """CPU model name and feature flags; empty flags where /proc/cpuinfo does not exist."""
    name, flags = platform.processor() or platform.machine(), frozenset()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return name, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and value.strip():
            name = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = frozenset(value.split())
    return name, flags
