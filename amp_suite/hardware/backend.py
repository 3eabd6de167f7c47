"""Which GPU stack this torch build drives. A ROCm build of PyTorch presents AMD GPUs as "cuda":
`torch.cuda.is_available()` is true, and `get_device_capability` reads an MI300's gfx942 as 9.4,
which the capability rule would take for a Hopper (tensor-core modes on, row-wise fp8 allowed),
and which the claims and the peak table would judge by NVIDIA's figures. Until the suite has a
rule and datasheet peaks of AMD's own, it refuses such a device in one line, before any cell runs
and again where a cell probes its device (a Ray worker on another box)."""

from __future__ import annotations

import torch

from amp_suite.errors import ConfigError


class UnsupportedBackend(ConfigError):
    """A device the suite would misjudge: one line, exit 2 at the CLI; a failed cell in a worker."""


def rocm_version() -> str | None:
    """The HIP version of a ROCm build of torch; None for a CUDA or CPU-only build."""
    return getattr(torch.version, "hip", None) or None


def refuse_rocm(device_type: str) -> None:
    """Raise UnsupportedBackend where `device_type` "cuda" means an AMD GPU under ROCm."""
    hip = rocm_version()
    if device_type != "cuda" or hip is None:
        return
    raise UnsupportedBackend(
        f"{_described()} runs under ROCm (HIP {hip}), which PyTorch presents as CUDA; the capability rule and"
        " the peak table amp-suite judges by are NVIDIA's, so AMD GPUs are refused rather than misjudged;"
        " --device cpu measures this machine's CPU"
    )


def _described() -> str:
    """"this GPU (AMD Instinct MI300X, read as compute capability 9.4)", as far as the driver answers."""
    try:
        major, minor = torch.cuda.get_device_capability(0)
        return f"this GPU ({torch.cuda.get_device_name(0)}, read as compute capability {major}.{minor})"
    except Exception:  # the description only decorates the refusal: a driver's error must not replace it
        return "this GPU"
