"""The capability rule a machine's record carries: what a GPU or a CPU does fast."""

from __future__ import annotations

import pytest

from amp_suite.records.machine import cpu_caps, cuda_caps


@pytest.mark.parametrize(
    "capability, tensor_cores, bf16, tf32",
    [
        ((6, 1), False, False, False),
        ((7, 0), True, False, False),
        ((7, 5), True, False, False),
        ((8, 0), True, True, True),
        ((9, 0), True, True, True),
    ],
)
def test_cuda_capability_rules(capability, tensor_cores, bf16, tf32):
    caps = cuda_caps("GPU", capability)
    assert (caps.tensor_cores, caps.fast_fp16, caps.fast_bf16, caps.tf32) == (tensor_cores, tensor_cores, bf16, tf32)
    assert caps.capability_str == f"{capability[0]}.{capability[1]}"


@pytest.mark.parametrize(
    "flags, bf16, fp16",
    [
        ({"avx2"}, False, False),
        ({"avx512f", "avx512_bf16"}, True, False),
        ({"avx512_bf16", "avx512_fp16", "amx_bf16"}, True, False),  # Sapphire Rapids: fp16 falls back
        ({"amx_bf16", "amx_fp16"}, True, True),
        ({"fphp", "asimdhp", "bf16"}, True, True),
    ],
)
def test_cpu_flag_rules(flags, bf16, fp16):
    caps = cpu_caps("CPU", frozenset(flags))
    assert (caps.fast_bf16, caps.fast_fp16, caps.tf32, caps.capability) == (bf16, fp16, False, None)
