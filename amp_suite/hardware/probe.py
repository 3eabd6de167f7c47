"""Probe the live device: its name, compute capability or CPU flags, turned into DeviceCaps
by the article's capability rule (amp_suite.records.machine, pure and torch-free), and the
host's cost per kernel on it (amp_suite.instruments.launches: some 3,000 tiny ops, under a
second on the slowest host, before any cell's first step)."""

from __future__ import annotations

import platform
from dataclasses import replace
from pathlib import Path

import torch

from amp_suite.hardware.backend import refuse_rocm
from amp_suite.instruments.launches import host_cost_per_kernel
from amp_suite.records.machine import DeviceCaps, cpu_caps, cuda_caps


def probe(device: torch.device) -> DeviceCaps:
    """Capabilities of the device a cell will run on, with the host's time per kernel there.
    Initialises CUDA when asked about it; refuses an AMD GPU that ROCm presents as CUDA."""
    refuse_rocm(device.type)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        caps = cuda_caps(torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index))
    else:
        caps = cpu_caps(*_cpuinfo())
    return replace(caps, host_us_per_kernel=host_cost_per_kernel(device).us_per_kernel)


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
