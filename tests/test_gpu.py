"""GPU-only checks (scripts/gpu-check.sh runs them); skipped where PyTorch sees no CUDA device."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_matrix

from amp_suite.cell import run_cell
from amp_suite.config import Matrix
from amp_suite.doctor import diagnose

pytestmark = pytest.mark.gpu


def _cell(precision: str):
    cells = Matrix.model_validate(tiny_matrix(steps=8)).cells("cuda")
    return next(c for c in cells if c.precision == precision)


def test_fp32_cell_on_cuda_is_true_float32_and_uses_cuda_timers(gpu):
    record = run_cell(_cell("fp32"))
    assert record.status == "ok", record.reason
    assert record.fp32_math["cuda.matmul"] == "ieee" and record.fp32_math["cudnn.conv"] == "ieee"
    assert record.peak_memory_kind == "cuda_max_allocated" and record.peak_memory_mb > 0
    assert record.environment["compute_capability"] and record.environment["cudnn"]


def test_amp_cells_on_cuda_run_what_the_gpu_supports(gpu):
    capability = torch.cuda.get_device_capability()
    for precision, needs in (("bf16", (8, 0)), ("fp16", (7, 0)), ("tf32", (8, 0))):
        record = run_cell(_cell(precision))
        if capability >= needs:
            assert record.status == "ok", (precision, record.reason)
        else:
            assert record.status == "skipped" and record.reason, precision
    fp16 = run_cell(_cell("fp16"))
    if fp16.status == "ok":
        assert fp16.matmul_dtype == "float16" and len(fp16.loss_scale_curve) == fp16.warmup_steps + fp16.steps


def test_doctor_on_cuda_reports_capability_and_nvml(gpu):
    report = diagnose(torch.device("cuda"))
    assert report["compute_capability"] == "{}.{}".format(*torch.cuda.get_device_capability())
    assert report["recommended_precision"] in ("bf16", "fp16", "fp32")
    assert "nvml" in report
