"""`amp-suite doctor`: what this machine can do, which precision the AMP article recommends, and
what a kernel costs its host (amp_suite.instruments.launches).

The rule: bf16 from compute capability 8.0; fp16 + GradScaler on 7.x (tensor cores, no fast
bf16); no AMP below 7.0. On a CPU: bf16 where the CPU has native bf16, fp16 + GradScaler only
with native fp16, else stay in fp32.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from amp_suite.hardware import environment
from amp_suite.hardware.backends import backend_of
from amp_suite.hardware.capability import recommend
from amp_suite.hardware.probe import probe
from amp_suite.instruments.launches import TIMED_KERNELS, method_on
from amp_suite.instruments.nvml import NVML_CLOCK_MEM, NVML_CLOCK_SM, NvmlDevice, decode_reasons


def diagnose(device: torch.device) -> dict[str, Any]:
    caps = probe(device)
    advice = recommend(caps)
    env = environment.collect(device, caps)
    report: dict[str, Any] = {
        "device": device.type,
        "device_name": caps.name,
        "compute_capability": caps.capability_str,
        "tensor_cores": caps.tensor_cores,
        "fast_bf16": caps.fast_bf16,
        "fast_fp16": caps.fast_fp16,
        "tf32_supported": caps.tf32,
        "tf32_matmul_setting": torch.backends.cuda.matmul.fp32_precision,
        "tf32_cudnn_setting": torch.backends.cudnn.conv.fp32_precision,
        "recommended_precision": advice.precision,
        "recommendation_reason": advice.reason,
        # What a step's kernels cost the host here: `amp-suite predict` weighs it against the GPU's work.
        "host_cost_per_kernel": {
            "microseconds": round(caps.host_us_per_kernel, 2) if caps.host_us_per_kernel is not None else None,
            "kernels_timed": TIMED_KERNELS,
            "measured_as": method_on(backend_of(device)),
        },
        "versions": {
            "driver": env["driver"],
            "torch_built_for_cuda": env["cuda"],
            "cudnn": env["cudnn"],
            **{name: env[name] for name in ("torch", "torchvision", "transformers")},
        },
    }
    if device.type == "cuda":
        report["nvml"] = nvml_state(device)
    return report


def nvml_state(device: torch.device, nvml: ModuleType | None = None) -> dict[str, Any] | None:
    """Clocks, power limit and clock-event reasons: why a GPU may run slower than its spec. Each
    reading stands alone; `not_reported` names the ones this driver or GPU did not give."""
    try:
        gpu = NvmlDevice.open(device, nvml)
    except ImportError:
        return None
    except Exception as exc:  # no driver library, a device NVML can't see
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        reasons = gpu.clock_event_reasons()
        watts = gpu.query("power limit", "nvmlDeviceGetPowerManagementLimit")
        return {
            "sm_clock_mhz": gpu.query("sm clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM),
            "sm_clock_max_mhz": gpu.query("max sm clock", "nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM),
            "memory_clock_mhz": gpu.query("memory clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_MEM),
            "power_limit_w": watts / 1000 if watts is not None else None,
            "clock_event_reasons": decode_reasons(reasons) if reasons is not None else None,
            "not_reported": gpu.missing,
        }
    finally:
        gpu.close()
