"""The T5 seq2seq workload (issue 25's t5-base, at toy size here): source and target cut from one
block, one step under every mode this CPU runs; the shipped smoke matrix runs it through the CLI
(tests/e2e/test_smoke.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_matrix

from amp_suite.cell.run import run_cell
from amp_suite.config import Matrix
from amp_suite.workloads import build_workload

TINY_T5 = {
    "workload": "t5", "n_layer": 2, "d_model": 32, "d_ff": 64, "n_head": 2, "source_len": 12, "target_len": 8,
    "vocab_size": 64, "batch_sizes": [8], "samples": 64, "lr": 0.001,
    "data": {"source": "synthetic", "val_samples": 32},
}  # fmt: skip


def test_the_target_continues_the_source():
    config = Matrix.model_validate(tiny_matrix(workloads=[TINY_T5])).workloads[0]
    data = build_workload(config).load_data()
    assert data.train.inputs.shape == (64, 12) and data.train.targets.shape == (64, 8)
    assert data.validation.inputs.shape == (32, 12) and data.validation.targets.shape == (32, 8)
    # One Markov chain runs through both halves: a source's last token is followed by its target's first.
    successors = {}
    for block in torch.cat([data.train.inputs, data.train.targets], dim=1).tolist():
        for here, after in zip(block[:-1], block[1:], strict=True):
            successors.setdefault(here, set()).add(after)
    crossings = zip(data.train.inputs[:, -1].tolist(), data.train.targets[:, 0].tolist(), strict=True)
    assert all(after in successors[here] for here, after in crossings)
    assert max(len(options) for options in successors.values()) <= 4  # the chain's fan-out, not noise


def test_the_parameter_estimate_matches_the_model_at_t5_base():
    """The config's estimate (which the memory checks use) against the model transformers builds."""
    t5_base = {**TINY_T5, "n_layer": 12, "d_model": 768, "d_ff": 3072, "n_head": 12, "vocab_size": 32128}
    config = Matrix.model_validate(tiny_matrix(workloads=[t5_base])).workloads[0]
    with torch.device("meta"):
        model = build_workload(config).build_model(None)
    built = sum(p.numel() for p in model.parameters())
    assert abs(config.parametercount() - built) / built < 0.01, (config.parametercount(), built)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16", "fp8-tensorwise"])
def test_one_step_trains_under_every_mode_this_cpu_runs(precision):
    """fp16 and fp8 are forced: this CPU has no fp16 or float8 units, but the paths are the GPU's (and bf16
    where the CPU has no bf16 instructions)."""
    matrix = tiny_matrix(workloads=[TINY_T5], steps=1, warmup_steps=1, precisions=[precision])
    (cell,) = Matrix.model_validate(matrix).cells("cpu", force=True)
    record = run_cell(cell)
    assert record.status == "ok", record.reason
    assert record.val_metric_name == "val_token_accuracy" and 0 <= record.val_metric <= 1 and record.val_loss > 0
    assert len(record.loss_curve) == 1 and torch.isfinite(torch.tensor(record.loss_curve)).all()
