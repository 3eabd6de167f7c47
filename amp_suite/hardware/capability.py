"""What the AMP article recommends for a device, from what it does fast. No torch here.

bf16 where the device has fast bf16; fp16 with GradScaler where it has fp16 tensor cores (or, on a
chip without them, fast fp16 units); fp32 otherwise. What a device does fast is the capability
rule's (amp_suite.records.machine): `hardware.probe` applies it to a live device, and a record
carries its result, so the report can advise for a machine it never saw.
"""

from __future__ import annotations

from dataclasses import dataclass

from amp_suite.records.machine import DeviceCaps


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
