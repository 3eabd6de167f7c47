"""The article's advice: which precision a device's capabilities call for."""

from __future__ import annotations

import pytest

from amp_suite.hardware.capability import recommend
from amp_suite.records.machine import cpu_caps, cuda_caps


@pytest.mark.parametrize(
    "capability, precision",
    [((6, 1), "fp32"), ((7, 0), "fp16"), ((7, 5), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16")],
)
def test_recommendation_follows_the_capability_rule(capability, precision):
    advice = recommend(cuda_caps("faked GPU", capability))
    assert advice.precision == precision
    assert f"{capability[0]}.{capability[1]}" in advice.reason


@pytest.mark.parametrize(
    "flags, precision",
    [
        ({"avx512_bf16"}, "bf16"),
        ({"avx512_fp16"}, "fp32"),
        ({"amx_fp16"}, "fp16"),
        ({"amx_bf16", "amx_fp16"}, "bf16"),
        ({"avx2"}, "fp32"),
    ],
)
def test_cpu_recommendation(flags, precision):
    assert recommend(cpu_caps("faked CPU", frozenset(flags))).precision == precision


@pytest.mark.parametrize(
    "name, tensor_cores",
    [
        ("NVIDIA GeForce GTX 1660 Ti", False),
        ("NVIDIA GeForce GTX 1650", False),
        ("NVIDIA T1000 8GB", False),
        ("NVIDIA GeForce MX450", False),
        ("Tesla T4", True),
        ("NVIDIA GeForce RTX 2080 Ti", True),
        ("Quadro RTX 5000", True),
    ],
)
def test_turing_chips_built_without_tensor_cores_are_told_apart_at_7_5(name, tensor_cores):
    caps = cuda_caps(name, (7, 5))
    assert caps.tensor_cores is tensor_cores
    assert caps.fast_fp16 and not caps.fast_bf16  # TU116/TU117 have double-rate fp16 units instead
    advice = recommend(caps)
    assert advice.precision == "fp16"
    assert ("no tensor cores" in advice.reason) is not tensor_cores
