"""The BERT masked-LM workload (issue 25's BERT-large, at toy size here): static masking every
precision shares, one step under every mode this CPU runs; the shipped smoke matrix runs it through the CLI
(tests/e2e/test_smoke.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_matrix

from amp_suite.cell.run import run_cell
from amp_suite.config import Matrix
from amp_suite.workloads import build_workload
from amp_suite.workloads.tokens import IGNORED_LABEL

TINY_BERT = {
    "workload": "bert", "n_layer": 2, "hidden": 32, "n_head": 2, "seq_len": 16, "vocab_size": 64, "batch_sizes": [8],
    "samples": 64, "lr": 0.001, "data": {"source": "synthetic", "val_samples": 32},
}  # fmt: skip


def test_masking_is_static_and_every_sequence_predicts_something():
    config = Matrix.model_validate(tiny_matrix(workloads=[TINY_BERT])).workloads[0]
    first, again = build_workload(config).load_data(), build_workload(config).load_data()
    assert torch.equal(first.train.inputs, again.train.inputs) and first.fingerprint == again.fingerprint
    masked = first.train.targets != IGNORED_LABEL
    assert masked.any(dim=1).all() and 0.08 < masked.float().mean() < 0.25  # about mask_fraction 0.15
    assert (first.train.inputs[masked] == 63).all() and (first.train.inputs[~masked] < 63).all()  # [MASK]: the last id


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16", "fp8-tensorwise"])
def test_one_step_trains_under_every_mode_this_cpu_runs(precision):
    """fp16 and fp8 are forced: this CPU has no fp16 or float8 units, but the paths are the GPU's (and bf16
    where the CPU has no bf16 instructions)."""
    matrix = tiny_matrix(workloads=[TINY_BERT], steps=1, warmup_steps=1, precisions=[precision])
    (cell,) = Matrix.model_validate(matrix).cells("cpu", force=True)
    record = run_cell(cell)
    assert record.status == "ok", record.reason
    assert record.val_metric_name == "val_mlm_accuracy" and 0 <= record.val_metric <= 1 and record.val_loss > 0
    assert len(record.loss_curve) == 1 and torch.isfinite(torch.tensor(record.loss_curve)).all()
