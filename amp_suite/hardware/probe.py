"""Probe the live device: its name, compute capability or CPU flags, turned into DeviceCaps
by the article's capability rule (amp_suite.records.machine, pure and torch-free) through the
device's backend, and the host's cost per kernel on it (amp_suite.instruments.launches: some 3,000
tiny ops, under a second on the slowest host, before any cell's first step)."""

from __future__ import annotations

from dataclasses import replace

import torch

from amp_suite.hardware.backends import backend_of
from amp_suite.instruments.launches import host_cost_per_kernel
from amp_suite.records.machine import DeviceCaps


def probe(device: torch.device) -> DeviceCaps:
    """Capabilities of the device a cell will run on, with the host's time per kernel there.
    Initialises CUDA when asked about it; refuses an AMD GPU that ROCm presents as CUDA."""
    backend = backend_of(device)
    return replace(backend.caps(), host_us_per_kernel=host_cost_per_kernel(backend).us_per_kernel)
