"""The AMP article's capability rule, as pure functions of what a device is. No torch here.

Tensor cores from compute capability 7.0 (fp16), except on the Turing chips built without them;
bf16 and TF32 from 8.0. On a CPU, autocast only pays where the instruction set has the dtype
(avx512_bf16/AMX for bf16, AMX-FP16 for fp16).
`hardware.probe` fills these in for a live device; the report rebuilds them from records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# CPU feature flags (Linux /proc/cpuinfo names) that mean native arithmetic in that dtype.
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # "bf16": AArch64 BF16 extension
# avx512_fp16 alone is not enough for training: on a Xeon with it (and no AMX-FP16), ResNet-18's
# fp16 cell ran 42x slower than fp32 (308 s vs 7.3 s; oneDNN's fp16 convolutions fall back there).
CPU_FP16_FLAGS = frozenset({"amx_fp16", "fphp", "asimdhp"})


# Compute capability 7.5 without tensor cores: NVIDIA's TU116 and TU117 chips carry dedicated
# double-rate fp16 units instead (Turing architecture whitepaper; the GTX 1660 and GTX 1650
# product pages list no tensor cores). Their products: GeForce GTX 16xx, GeForce MX450/MX550, and
# the professional T400, T500, T550, T600, T1000 and T1200.
TURING_WITHOUT_TENSOR_CORES = re.compile(r"\bGTX 16\d\d|\bMX(450|550)\b|\bT(400|500|550|600|1000|1200)\b")


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
    no_tensor_core_turing = capability == (7, 5) and bool(TURING_WITHOUT_TENSOR_CORES.search(name))
    ampere_or_newer = capability >= (8, 0)
    return DeviceCaps(
        type="cuda",
        name=name,
        capability=capability,
        tensor_cores=capability >= (7, 0) and not no_tensor_core_turing,
        fast_fp16=capability >= (7, 0),  # tensor cores, or TU116/TU117's double-rate fp16 units
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


@dataclass(frozen=True)
class Recommendation:
    precision: str
    reason: str


def recommend(caps: DeviceCaps) -> Recommendation:
    if caps.type == "cuda":
        where = f"compute capability {caps.capability_str}"
        if caps.fast_bf16:
            return Recommendation("bf16", f"{where} >= 8.0: bf16 has fp32's range, so no loss scaling is needed")
        if caps.tensor_cores:
            return Recommendation("fp16", f"{where} has fp16 tensor cores but no fast bf16: fp16 with GradScaler")
        if caps.fast_fp16:
            return Recommendation(
                "fp16",
                f"{where}, but this chip has no tensor cores: fp16 with GradScaler can gain only from its"
                " double-rate fp16 units and halved memory traffic, far less than on tensor-core GPUs",
            )
        return Recommendation("fp32", f"{where} < 7.0 has no tensor cores: AMP would not pay off")
    if caps.fast_bf16:
        return Recommendation("bf16", "this CPU has native bf16 instructions")
    if caps.fast_fp16:
        return Recommendation("fp16", "this CPU has native fp16 arithmetic but not bf16: fp16 with GradScaler")
    return Recommendation("fp32", "this CPU has neither native bf16 nor fp16: autocast would be emulated")
