"""fp8 training (torchao.float8) through `amp-suite run` on this CPU: skipped with its reason where
it isn't forced, and the matrix goes on; forced, it trains for real (this CPU's torch._scaled_mm is a
software kernel) and its record proves the float8 matmuls ran. The speed of fp8 is a GPU question
(scripts/gpu-check.sh); what this checks is the path and the proof."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import amp_suite, read_records, tiny_matrix

pytestmark = pytest.mark.slow


def test_fp8_cells_are_skipped_with_their_reason_and_forced_ones_prove_their_float8_matmuls(tmp_path):
    matrix = tiny_matrix(precisions=["fp32", "bf16", "fp8-tensorwise", "fp8-rowwise"])
    workload = matrix["workloads"][0]
    # Every layer 16 -> 32 -> 32 -> 16: multiples of 16, as float8 matmuls need (a 10-class head would stay bf16).
    workload.update(num_classes=16, force=["bf16", "fp8-rowwise"], data={"source": "synthetic"})
    (tmp_path / "fp8.yaml").write_text(yaml.safe_dump(matrix))
    done = amp_suite("run", "--matrix", "fp8.yaml", "--out", "out", "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    records = {r["precision"]: r for r in read_records(tmp_path / "out")}
    skipped = records["fp8-tensorwise"]
    assert skipped["status"] == "skipped"
    assert skipped["reason"].startswith("fp8 training (tensorwise) needs an NVIDIA GPU of compute capability >= 8.9")
    forced = records["fp8-rowwise"]
    assert forced["status"] == "ok" and forced["reason"].startswith("forced despite: fp8 training (rowwise)")
    assert forced["matmul_dtype"] == "float8_e4m3fn" and forced["fp8_layers"] == 3
    assert forced["dtype_audit"]["checks"]["fp8_scaled_matmuls"] is True
    scaled = [op for op in forced["dtype_audit"]["ops"] if op["op"] == "_scaled_mm"]
    assert {op["phase"] for op in scaled} == {"forward", "backward"} and all(op["ran_in"] == "float8" for op in scaled)
    assert records["fp32"]["status"] == "ok" and "fp8-rowwise" in done.stdout  # its parity against fp32, tabled
    # FLOPs are the model's, as written: torchao's backward also computes the first layer's input
    # gradient, which read as 9% more work here (98,304 FLOPs against 90,112), and inflated fp8's MFU.
    assert forced["flops_per_step"] == records["bf16"]["flops_per_step"] == records["fp32"]["flops_per_step"]
    # Its speed question is bf16's as well as fp32's: `report --baseline bf16` divides by bf16.
    report = amp_suite("report", "out", "--baseline", "bf16", "--out", "against-bf16", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    rows = {r["precision"]: r for r in json.loads((tmp_path / "against-bf16" / "report.json").read_text())["rows"]}
    speedups = rows["fp8-rowwise"]["speedups"]
    assert speedups["bf16"]["value"] == pytest.approx(forced["throughput"] / records["bf16"]["throughput"])
    assert speedups["fp32"]["value"] == pytest.approx(forced["throughput"] / records["fp32"]["throughput"])


def cuda_takes(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """CUDA's torch._scaled_mm rule (aten/src/ATen/native/cuda/Blas.cpp): mat1's trailing size and
    both of mat2's sizes divisible by 16. A CPU's software kernel checks none of it."""
    return a[1] % 16 == 0 and b[0] % 16 == 0 and b[1] % 16 == 0


@pytest.mark.parametrize("precision", ["fp8-tensorwise", "fp8-rowwise"])
def test_every_matmul_fp8_sends_to_scaled_mm_has_sizes_cuda_takes_even_at_batch_8(precision, monkeypatch):
    """The weight gradient multiplies (out x tokens) by (tokens x in): at batch 8 the inner size is
    8, and 2 in the step diagnostics' micro-batch. Recorded on this CPU, judged by CUDA's rule."""
    import torch

    from amp_suite.cell.pipeline import prepare, step_diagnostics
    from amp_suite.config import Matrix

    matrix = tiny_matrix(precisions=[precision], steps=2, warmup_steps=1)
    matrix["workloads"][0].update(num_classes=16, force=[precision], data={"source": "synthetic"})
    (spec,) = Matrix.model_validate(matrix).cells("cpu")
    assert spec.batch_size == 8
    shapes, real = [], torch._scaled_mm

    def recorded(a, b, *args, **kwargs):
        shapes.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", recorded)
    session = prepare(spec, torch.device("cpu"))
    step_diagnostics(session.model, session.workload.loss, session.policy, session.batches)
    session.trainer.run(session.batches, 2)
    assert len(shapes) >= 9 * 3  # 3 layers x (forward, input and weight gradients), training and diagnostics
    refused = [(a, b) for a, b in shapes if not cuda_takes(a, b)]
    assert not refused, refused
