"""`amp-suite doctor` in words and `amp-suite inspect --help` from the workload registry."""

from __future__ import annotations

from amp_suite.cli.device import doctor_lines
from amp_suite.config import WORKLOADS

REPORT = {
    "device": "cpu", "device_name": "Some CPU", "compute_capability": None, "tensor_cores": False,
    "fast_bf16": True, "fast_fp16": False, "tf32_supported": False, "tf32_matmul_setting": "none",
    "tf32_cudnn_setting": "tf32", "recommended_precision": "bf16", "recommendation_reason": "native bf16",
    "versions": {"driver": None, "torch_built_for_cuda": "13.0", "torch": "2.14.1"}, "cuda_available": False,
}  # fmt: skip


def test_doctor_speaks_words_not_keys():
    said = "\n".join(doctor_lines(REPORT))
    assert "recommended precision: bf16" in said and "tensor cores: no" in said and "fast bf16: yes" in said
    assert "torch built for CUDA 13.0" in said and "driver not known" in said
    assert not any(key in said for key in ("tf32_supported", "fast_bf16", "device_name", "=")), said


def test_tf32_settings_are_shown_only_where_tf32_exists():
    on_cpu = "\n".join(doctor_lines(REPORT))
    assert "TF32: not on this device (the TF32 settings have no effect here)" in on_cpu
    assert "cuDNN" not in on_cpu and "matmuls" not in on_cpu, on_cpu
    on_gpu = "\n".join(doctor_lines(REPORT | {"tf32_supported": True, "tf32_matmul_setting": "ieee"}))
    assert "TF32: yes" in on_gpu and "TF32 in matmuls: off (ieee)" in on_gpu
    assert "TF32 in cuDNN convolutions: on (tf32)" in on_gpu


def test_inspect_help_lists_the_registrys_workloads():
    from typer.testing import CliRunner

    from amp_suite.cli import app

    shown = " ".join(CliRunner().invoke(app, ["inspect", "--help"], env={"COLUMNS": "400"}).output.split())
    assert all(name in shown for name in WORKLOADS), shown
