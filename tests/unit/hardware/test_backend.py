"""An AMD GPU under ROCm presents as CUDA; simulated here as the suite's tests simulate CUDA devices
(torch's answers patched on a CPU): what a ROCm build of torch reports for an MI300X."""

from __future__ import annotations

import pytest
import torch

from amp_suite.hardware.backend import UnsupportedBackend, refuse_rocm, rocm_version
from amp_suite.hardware.probe import probe


@pytest.fixture
def mi300x(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2.41133-dd7f95766", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *index: "AMD Instinct MI300X")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *index: (9, 4))  # gfx942
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_a_rocm_device_is_refused_in_one_line_before_the_capability_rule_reads_it(mi300x):
    with pytest.raises(UnsupportedBackend) as refused:
        probe(torch.device("cuda"))
    message = str(refused.value)
    assert "\n" not in message and "AMD Instinct MI300X" in message and "ROCm (HIP 6.2.41133" in message
    assert "--device cpu" in message


def test_the_cpu_of_a_rocm_build_and_a_cuda_build_are_judged_as_they_were(mi300x, monkeypatch):
    refuse_rocm("cpu")  # the CPU of a ROCm machine is a CPU
    assert probe(torch.device("cpu")).type == "cpu"
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert rocm_version() is None
    refuse_rocm("cuda")  # a CUDA build's GPU goes on to NVIDIA's rule
