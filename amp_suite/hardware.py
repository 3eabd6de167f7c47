"""What this device can do fast: tensor cores, bf16, fp16, TF32.

The rules are the ones the AMP article gives: tensor cores from compute capability 7.0 (fp16),
bf16 and TF32 from 8.0. On a CPU, autocast only pays where the instruction set has the dtype
(avx512_bf16/AMX for bf16, AMX-FP16 for fp16); elsewhere it is emulated or slow.
`cuda_caps` and `cpu_caps` are pure so they can be tested with faked devices.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

import torch

# CPU feature flags (Linux /proc/cpuinfo names) that mean native arithmetic in that dtype.
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # "bf16": AArch64 BF16 extension
# avx512_fp16 alone is not enough for training: on a Xeon with it (and no AMX-FP16), ResNet-18's
# fp16 cell ran 42x slower than fp32 (308 s vs 7.3 s; oneDNN's fp16 convolutions fall back there).
CPU_FP16_FLAGS = frozenset({"amx_fp16", "fphp", "asimdhp"})


@dataclass(frozen=True)
class DeviceCaps:
    type: str  # "cuda" or "cpu"
    name: str
    capability: tuple[int, int] | None  # CUDA compute capability; None on CPU
    tensor_cores: bool
    fast_fp16: bool
    fast_bf16: bool
    tf32: bool

    @property
    def capability_str(self) -> str | None:
        return f"{self.capability[0]}.{self.capability[1]}" if self.capability else None


def cuda_caps(name: str, capability: tuple[int, int]) -> DeviceCaps:
    tensor_cores = capability >= (7, 0)
    ampere_or_newer = capability >= (8, 0)
    return DeviceCaps(
        type="cuda",
        name=name,
        capability=capability,
        tensor_cores=tensor_cores,
        fast_fp16=tensor_cores,
        fast_bf16=ampere_or_newer,
        tf32=ampere_or_newer,
    )


def cpu_caps(name: str, flags: frozenset[str]) -> DeviceCaps:
    return DeviceCaps(
        type="cpu",
        name=name,
        capability=None,
        tensor_cores=False,
        fast_fp16=bool(flags & CPU_FP16_FLAGS),
        fast_bf16=bool(flags & CPU_BF16_FLAGS),
        tf32=False,
    )


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
