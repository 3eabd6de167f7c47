"""Language models on token blocks (amp_suite.workloads.tokens): the blocks each one cuts its
inputs and targets from, and validation that counts labelled tokens only."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_matrix
from torch.nn import functional as F

from amp_suite.config import Matrix
from amp_suite.data import TensorData
from amp_suite.data.convert import DataShapeError
from amp_suite.workloads import build_workload
from amp_suite.workloads.tokens import IGNORED_LABEL

TINY_GPT = {
    "workload": "transformer", "n_layer": 1, "n_embd": 16, "n_head": 2, "seq_len": 16, "vocab_size": 64,
    "batch_sizes": [8], "samples": 32, "data": {"source": "synthetic", "val_samples": 16},
}  # fmt: skip
TINY_T5 = {
    "workload": "t5", "n_layer": 1, "d_model": 16, "d_ff": 32, "n_head": 2, "source_len": 12, "target_len": 8,
    "vocab_size": 64, "batch_sizes": [8], "samples": 32, "data": {"source": "synthetic", "val_samples": 16},
}  # fmt: skip


def workload_of(config: dict):
    return build_workload(Matrix.model_validate(tiny_matrix(workloads=[config])).workloads[0])


def test_a_causal_lm_learns_each_block_from_itself():
    data = workload_of(TINY_GPT).load_data()
    assert data.train.inputs.shape == (32, 16) and torch.equal(data.train.inputs, data.train.targets)
    assert data.validation.inputs.shape == (16, 16) and int(data.train.inputs.max()) < 64


def test_ids_beyond_the_vocabulary_are_refused_in_targets_too():
    workload = workload_of(TINY_T5)
    inputs = torch.zeros(4, 12, dtype=torch.long)
    workload.check(TensorData(inputs, torch.full((4, 8), IGNORED_LABEL)), "data")  # not counted: no id
    with pytest.raises(DataShapeError, match="vocab_size is 64"):
        workload.check(TensorData(inputs, torch.full((4, 8), 64)), "data")


class EchoLM(torch.nn.Module):
    """Predicts each input token (a one-hot logit), with Hugging Face's loss over labelled tokens."""

    def forward(self, input_ids, labels):
        logits = F.one_hot(input_ids, 8).float() * 4
        return SimpleNamespace(logits=logits, loss=F.cross_entropy(logits.flatten(0, 1), labels.flatten()))


def test_validation_counts_labelled_tokens_over_uneven_batches():
    workload = workload_of(TINY_T5)
    inputs = torch.randint(0, 8, (5, 6), generator=torch.Generator().manual_seed(0))
    targets = torch.full_like(inputs, IGNORED_LABEL)
    targets[:, :2] = inputs[:, :2]  # labelled and predicted right
    targets[0, 2:5] = (inputs[0, 2:5] + 1) % 8  # labelled and predicted wrong
    metrics = workload.evaluate(EchoLM(), TensorData(inputs, targets), 2, contextlib.nullcontext)  # 2, 2, 1 samples
    logits = F.one_hot(inputs, 8).float() * 4
    assert metrics["val_token_accuracy"] == 10 / 13
    assert metrics["val_loss"] == pytest.approx(F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item())
