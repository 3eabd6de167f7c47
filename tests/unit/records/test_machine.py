"""The capability rule a machine's record carries (what a GPU or a CPU does fast), and its host's
cost per kernel."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from amp_suite.records.machine import Machine, cpu_caps, cuda_caps


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


MACHINE = {
    "device_type": "cuda", "device_name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580.95",
    "cuda": "13.0", "torch": "2.11.0", "host": "vm-1", "tensor_cores": True, "fast_fp16": True,
    "fast_bf16": True, "tf32": True,
}  # fmt: skip


def test_the_hosts_cost_per_kernel_is_kept_but_out_of_the_key_and_older_machines_still_validate():
    older = Machine.model_validate(MACHINE)  # written before the measurement
    assert older.host_us_per_kernel is None
    slow = Machine.model_validate(MACHINE | {"host": "vm-2", "host_us_per_kernel": 47.0})
    assert slow.host_us_per_kernel == 47.0
    assert slow.key == older.key and "47" not in slow.key  # a host's speed pools, as its name does
    assert slow.caps is not None and slow.caps.host_us_per_kernel == 47.0


@pytest.mark.parametrize("figure", [float("nan"), float("inf"), 0.0, -3.0])
def test_a_host_figure_the_suite_could_not_have_measured_is_refused(figure):
    with pytest.raises(ValidationError):
        Machine.model_validate(MACHINE | {"host_us_per_kernel": figure})


def test_a_machine_described_from_its_probe_keeps_the_probes_host_figure():
    caps = replace(cuda_caps("NVIDIA H200", (9, 0)), host_us_per_kernel=6.5)
    machine = Machine.describe(caps, {"driver": "580.95", "cuda": "13.0", "torch": "2.11.0", "hostname": "vm-1"})
    assert machine.host_us_per_kernel == 6.5 and machine.host == "vm-1"
