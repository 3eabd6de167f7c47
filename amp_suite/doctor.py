"""`amp-suite doctor`: what this machine can do, and which precision the AMP article recommends.

The rule: bf16 from compute capability 8.0; fp16 + GradScaler on 7.x (tensor cores, no fast
bf16); no AMP below 7.0. On a CPU: bf16 where the CPU has native bf16, fp16 + GradScaler only
with native fp16, else stay in fp32.
"""

from __future__ import annotations

from typing import Any

import torch

from amp_suite import environment
from amp_suite.capability import recommend
from amp_suite.hardware import probe


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
        "versions": {
            "driver": env["driver"],
            "torch_built_for_cuda": env["cuda"],
            "cudnn": env["cudnn"],
            **{name: env[name] for name in ("torch", "torchvision", "transformers")},
        },
    }
    if device.type == "cuda":
        report["nvml"] = nvml_state(device.index or 0)
    return report


def nvml_state(index: int) -> dict[str, Any] | None:
    """Clocks, power limit and active throttle reasons: why a GPU may run slower than its spec."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"error": str(exc)}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        return {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "power_limit_w": pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000,
            "throttle_reasons": _throttle_names(pynvml, reasons),
        }
    except pynvml.NVMLError as exc:
        return {"error": str(exc)}
    finally:
        pynvml.nvmlShutdown()


def _throttle_names(pynvml, mask: int) -> list[str]:
    prefix = "nvmlClocksEventReason"
    names = [name for name in dir(pynvml) if name.startswith(prefix) and name not in (f"{prefix}All", f"{prefix}None")]
    return sorted(name.removeprefix(prefix) for name in names if getattr(pynvml, name) & mask)
