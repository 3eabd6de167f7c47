"""An AMD GPU under ROCm, recognised as its own. A ROCm build of PyTorch presents AMD GPUs as
"cuda": `torch.cuda.is_available()` is true, and `get_device_capability` reads an MI300's gfx942
as 9.4, which NVIDIA's capability rule would take for a Hopper (tensor-core modes on, row-wise fp8
allowed), and which the claims and the peak table would judge by NVIDIA's figures. Until the suite
has a rule and datasheet peaks of AMD's own, this backend claims such a device before CUDA's does
and refuses it in one line: before any cell runs, and again where a cell probes its device (a Ray
worker on another box).

No torch here: the claim imports it when asked about a "cuda" device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amp_suite.hardware.backends import Backend, UnsupportedBackend, register

if TYPE_CHECKING:
    import torch


def rocm_version() -> str | None:
    """The HIP version of a ROCm build of torch; None for a CUDA or CPU-only build."""
    import torch

    return getattr(torch.version, "hip", None) or None


@register
class RocmBackend(Backend):
    type = "rocm"  # its own name; torch calls its devices "cuda"
    is_host = False
    ray_resource = "GPU"
    process_group = "nccl"  # RCCL, under NCCL's name
    new_process_mb = 1024.0
    reports_oom = True
    autotunes_convolutions = True
    visible_devices = "HIP_VISIBLE_DEVICES"
    default_matrix = "default.yaml"
    peak_memory_kind = "cuda_max_allocated"
    launch_method = "host time to enqueue a tiny eager kernel (batches of {per_batch})"

    @classmethod
    def claims(cls, device_type: str) -> bool:
        return device_type == "cuda" and rocm_version() is not None

    def __init__(self, device: torch.device) -> None:
        raise UnsupportedBackend(
            f"{_described()} runs under ROCm (HIP {rocm_version()}), which PyTorch presents as CUDA; the capability"
            " rule and the peak table amp-suite judges by are NVIDIA's, so AMD GPUs are refused rather than"
            " misjudged; --device cpu measures this machine's CPU"
        )


def _described() -> str:
    """"this GPU (AMD Instinct MI300X, read as compute capability 9.4)", as far as the driver answers."""
    import torch

    try:
        major, minor = torch.cuda.get_device_capability(0)
        return f"this GPU ({torch.cuda.get_device_name(0)}, read as compute capability {major}.{minor})"
    except Exception:  # the description only decorates the refusal: a driver's error must not replace it
        return "this GPU"
