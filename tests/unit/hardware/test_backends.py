"""The backends: each kind of device behind one interface, registered; an AMD GPU under ROCm, which
presents as CUDA, is recognised as its own and refused. ROCm is simulated here as the suite's
tests simulate CUDA devices (torch's answers patched on a CPU): what a ROCm build reports for an
MI300X."""

from __future__ import annotations

import pytest
import torch

from amp_suite.errors import ConfigError
from amp_suite.hardware.backends import Backend, UnsupportedBackend, backend_named, backend_of, registered
from amp_suite.hardware.backends.cpu import CpuBackend
from amp_suite.hardware.backends.cuda import CudaBackend
from amp_suite.hardware.backends.rocm import RocmBackend, rocm_version
from amp_suite.hardware.probe import probe
from amp_suite.instruments import LiveDevice


@pytest.fixture
def mi300x(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2.41133-dd7f95766", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *index: "AMD Instinct MI300X")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *index: (9, 4))  # gfx942
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_each_device_type_has_its_backend_and_rocm_is_asked_before_cuda():
    assert [cls.type for cls in registered()] == ["rocm", "cuda", "cpu"]
    assert backend_named("cuda") is CudaBackend and backend_named("cpu") is CpuBackend
    assert isinstance(backend_of("cpu"), CpuBackend) and isinstance(backend_of(torch.device("cuda", 1)), CudaBackend)
    with pytest.raises(ConfigError, match="no backend for device type 'tpu'; known: rocm, cuda, cpu"):
        backend_named("tpu")


@pytest.mark.parametrize("cls", [CpuBackend, CudaBackend, RocmBackend])
def test_every_backend_states_every_fact(cls):
    facts = [name for name, value in vars(Backend)["__annotations__"].items() if "ClassVar" in str(value)]
    missing = [name for name in facts if not hasattr(cls, name)]
    assert not missing and len(facts) >= 10, missing


def test_a_backend_is_the_live_device_the_instruments_read():
    cpu = backend_of("cpu")
    members = [*LiveDevice.__annotations__, *(name for name in vars(LiveDevice) if not name.startswith("_"))]
    assert len(members) >= 10 and all(hasattr(cpu, name) for name in members)
    kind = cpu.reset_peak_memory()
    assert kind in ("cpu_peak_rss", "cpu_peak_rss_since_process_start")
    peak, reserved = cpu.peak_memory_mb()
    assert peak > 0 and reserved is None
    assert cpu.held()["held_mb"] > 0 and cpu.memory_at_oom() == {} and cpu.gpu_reader() is None
    assert cpu.device_time_ms(lambda: torch.ones(256, 256) @ torch.ones(256, 256)) > 0


def test_a_rocm_device_is_refused_in_one_line_before_the_capability_rule_reads_it(mi300x):
    with pytest.raises(UnsupportedBackend) as refused:
        probe(torch.device("cuda"))
    message = str(refused.value)
    assert "\n" not in message and "AMD Instinct MI300X" in message and "ROCm (HIP 6.2.41133" in message
    assert "--device cpu" in message
    with pytest.raises(UnsupportedBackend):
        backend_of("cuda")


def test_the_cpu_of_a_rocm_build_and_a_cuda_build_are_judged_as_they_were(mi300x, monkeypatch):
    assert isinstance(backend_of("cpu"), CpuBackend)  # the CPU of a ROCm machine is a CPU
    assert probe(torch.device("cpu")).type == "cpu"
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert rocm_version() is None
    assert isinstance(backend_of("cuda"), CudaBackend)  # a CUDA build's GPU goes on to NVIDIA's rule
