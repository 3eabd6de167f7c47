"""GPU-only checks (scripts/gpu-check.sh runs them); skipped where PyTorch sees no CUDA device."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_matrix

from amp_suite.cell.run import run_cell
from amp_suite.config import Matrix
from amp_suite.hardware.doctor import diagnose

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
    assert record.machine is not None and 0 < record.machine.host_us_per_kernel < 1000  # the probe's enqueue time


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
    host = report["host_cost_per_kernel"]  # the host's time to enqueue a tiny kernel, the GPU's waits left out
    assert 0 < host["microseconds"] < 1000 and "enqueue" in host["measured_as"], host


def test_nvml_reads_energy_clocks_and_temperature_over_the_timed_steps(gpu):
    """Sized so the timed steps take well over a second (NVML's energy counter is coarse)."""
    wide = {"workload": "mlp", "in_features": 1024, "hidden": 4096, "depth": 4, "batch_sizes": [4096],
            "samples": 8192, "data": {"source": "synthetic", "val_samples": 512}}  # fmt: skip
    spec = Matrix.model_validate(tiny_matrix(steps=400, warmup_steps=20, workloads=[wide])).cells("cuda")[0]
    record = run_cell(spec)
    assert record.status == "ok", record.reason
    assert record.energy_j and record.energy_j > 0 and record.energy_j_per_sample == pytest.approx(
        record.energy_j / (4096 * 400)
    )
    assert 10 < record.power_w < 2000, record.power_w
    assert record.sm_clock_mhz_start > 0 and record.sm_clock_mhz_end > 0
    assert 0 < record.temperature_c_start < 120 and 0 < record.temperature_c_end < 120
    assert isinstance(record.throttled, bool) and isinstance(record.throttle_reasons, list)
    assert record.flops_per_step > 0 and record.tflops > 0
    if record.peak_tflops is not None:  # a GPU in the sourced peak table: MFU is a fraction of its peak
        assert 0 < record.mfu < 1, (record.mfu, record.device_name)
    print(f"NVML: {record.energy_j:.1f} J, {record.power_w:.0f} W, SM {record.sm_clock_mhz_start}->"
          f"{record.sm_clock_mhz_end} MHz, {record.temperature_c_start}->{record.temperature_c_end} C,"
          f" throttled {record.throttled} {record.throttle_reasons}; {record.tflops:.1f} TFLOP/s,"
          f" MFU {record.mfu}")  # fmt: skip


# Each cell process caps its CUDA allocator (the cap is set in the cell, after the fork: the
# forkserver never touches CUDA), so a real CUDA out-of-memory error comes at a small batch.
CAPPED_ALLOCATOR = """
import torch
import amp_suite.cell.run

real_prepare = amp_suite.cell.run.prepare


def prepare(spec, device):
    torch.cuda.set_per_process_memory_fraction(2 * 2**30 / torch.cuda.get_device_properties(0).total_memory)
    return real_prepare(spec, device)


amp_suite.cell.run.prepare = prepare
"""


def test_the_largest_batch_is_found_against_real_cuda_out_of_memory(gpu, tmp_path):
    import yaml
    from conftest import amp_suite, read_records

    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(CAPPED_ALLOCATOR)
    lm = {"workload": "transformer", "n_layer": 4, "n_embd": 512, "n_head": 8, "seq_len": 512, "vocab_size": 8192,
          "batch_sizes": ["auto"], "samples": 4096, "data": {"source": "synthetic", "val_samples": 64}}  # fmt: skip
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(name="auto", precisions=["fp32", "bf16"], workloads=[lm])))
    done = amp_suite("run", "--matrix", str(path), "--out", str(tmp_path / "out"), "--device", "cuda",
                     cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "hooks")})  # fmt: skip
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stdout + done.stderr
    records = {r["precision"]: r for r in read_records(tmp_path / "out")}
    for record in records.values():
        assert record["status"] == "ok" and record["batch_search"]["limited_by"] == "memory", record["batch_search"]
        assert "oom" in {status for _, status in record["batch_search"]["probes"]}
    # AMP's activations are up to half the size. With step diagnostics that held fp32's activations
    # in every precision, bf16 would fit only a few percent more than fp32 (fp32's optimizer state
    # aside), so a bare `>` would pass even then; 1.2x leaves room for what autocast keeps in fp32
    # (layer norms, the residual stream, the loss's fp32 logits).
    fp32, bf16 = records["fp32"]["batch_size"], records["bf16"]["batch_size"]
    assert bf16 >= 1.2 * fp32, (fp32, bf16)

