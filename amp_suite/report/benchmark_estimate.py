"""`amp-suite predict`'s estimate of a published kernel-benchmark figure (torchao's float8 single
linear, amp_suite.cell.float8_benchmark): its program profiled on fake tensors, compiled, and each
side's step estimated by the roofline on the publisher's GPU. For `amp-suite predict`, which prints
it, and for the report, which holds a measured figure against it. Imports torch when called.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from amp_suite.analysis.roofline import estimate_step, speedup
from amp_suite.config.precisions import BF16_BASELINE
from amp_suite.hardware.peaks import gpu_spec

if TYPE_CHECKING:
    from amp_suite.analysis.roofline import StepEstimate
    from amp_suite.hardware.peaks import GpuSpec

def published_shape(config: dict[str, Any]) -> tuple[int, int, int]:
    """M, K, N of a reference's config (the suite's terms: the batch, the Linear's in and out features)."""
    return config["batch_size"], config["in_features"], config["out_features"]


def estimate_published(reference: Any) -> tuple[GpuSpec, dict[str, StepEstimate]] | None:
    """`amp-suite predict`'s estimate of a published figure of this benchmark (a references entry):
    the program profiled on fake tensors, compiled, each side's step on the publisher's GPU (its memory
    bandwidth where the publisher's is a variant), with no launch cost: its time is the kernels' alone.
    None where the peak table has no such GPU."""
    from amp_suite.cell.float8_benchmark import profile_benchmark

    gpu = gpu_spec(reference.gpu)
    if gpu is None:
        return None
    gpu = replace(gpu, launch_us=0.0, memory_gbps=reference.gpu_memory_gbps or gpu.memory_gbps)
    shape = published_shape(reference.config)
    modes = (reference.baseline or BF16_BASELINE, reference.precision)
    return gpu, {mode: estimate_step(profile_benchmark(*shape, mode).costs(compiled=True), gpu, mode) for mode in modes}


def estimated_speedup(reference: Any) -> float | None:
    """The published speedup as `amp-suite predict` estimates it: the baseline's step over the mode's."""
    estimated = estimate_published(reference)
    if estimated is None:
        return None
    steps = estimated[1]
    return speedup(steps[reference.precision], steps[reference.baseline or BF16_BASELINE])
