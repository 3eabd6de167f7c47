"""What every workload shares: validation summed batch by batch (amp_suite.workloads.base), and
each module's metric labelled by its config."""

from __future__ import annotations

import contextlib
import importlib

import pytest
import torch
import yaml
from conftest import REPO, tiny_matrix
from torch.nn import functional as F

from amp_suite.config import Matrix
from amp_suite.config.workloads import HF_TASK_METRIC_LABELS, WORKLOAD_CONFIGS, CustomConfig, HfConfig
from amp_suite.data import TensorData
from amp_suite.workloads import build_workload
from amp_suite.workloads.base import validation_sums

# The labels the terminal printed before the configs declared them (cli/display.py's table).
PRINTED = {
    "val_accuracy": "acc",
    "val_perplexity": "ppl",
    "val_mlm_accuracy": "mlm acc",
    "val_token_accuracy": "token acc",
}


def test_validation_sums_add_up_every_batch_in_eval_mode():
    data = TensorData(torch.arange(10.0), torch.ones(10))
    model = torch.nn.Linear(1, 1)
    modes = []

    def sums(inputs, targets):
        modes.append(model.training)
        return inputs.sum(), targets.sum().long()

    totals = validation_sums(model, data, 4, sums)  # batches of 4, 4 and 2
    assert totals == (45.0, 10) and modes == [False] * 3 and model.training
    assert all(isinstance(total, float | int) for total in totals)


def test_a_classifier_scores_the_whole_validation_set():
    config = Matrix.model_validate(tiny_matrix()).workloads[0]
    workload = build_workload(config)
    torch.manual_seed(0)
    data = TensorData(torch.randn(11, 16), torch.randint(0, 10, (11,)))
    model = workload.build_model(data)
    result = workload.evaluate(model, data, 4, contextlib.nullcontext)
    with torch.no_grad():
        logits = model(data.inputs)
    assert result["val_loss"] == pytest.approx(F.cross_entropy(logits, data.targets).item(), rel=1e-5)
    assert result["val_accuracy"] == (logits.argmax(dim=1) == data.targets).sum().item() / 11


def test_every_workload_modules_metric_keeps_its_label():
    """A workload's metric (its module's primary_metric) and its label (its config's) are declared
    apart: they must still name the same thing."""
    hf = importlib.import_module(HfConfig.module)
    for config in WORKLOAD_CONFIGS:
        if config is CustomConfig:
            continue  # the entry names its metric, and so its label
        if config.kernel_benchmark:
            continue  # a benchmark of kernels trains nothing: it has no validation metric
        if config is HfConfig:
            for task, workload in hf.TASKS.items():
                assert PRINTED[workload.primary_metric] == HF_TASK_METRIC_LABELS[task], task
            continue
        workload = importlib.import_module(config.module).WORKLOAD
        assert PRINTED[workload.primary_metric] == config.metric_label, config.__name__


def test_chance_is_what_guessing_by_label_frequency_alone_scores():
    """Three of four labels are 2: guessing 2 scores 0.75. Tokens half 0, half 1: perplexity 2."""
    from amp_suite.workloads.base import commonest_share, unigram_perplexity

    assert commonest_share(torch.tensor([2, 2, 0, 2])) == pytest.approx(0.75)
    assert unigram_perplexity(torch.tensor([[0, 1], [1, 0]])) == pytest.approx(2.0)
    assert unigram_perplexity(torch.tensor([5, 5, 5])) == pytest.approx(1.0)  # one token: nothing to guess


def test_every_reference_workload_knows_its_chance_level():
    """The metric a model scores by the labels' frequencies alone, on the smoke matrix's data: an accuracy
    in (0, 1), a perplexity above 1. (A custom entry's metric is its own: Workload's default, None.)"""
    spec = yaml.safe_load((REPO / "experiments" / "smoke.yaml").read_text())
    for config in Matrix.model_validate(spec).workloads:
        workload = build_workload(config)
        chance = workload.chance_metric(workload.load_data().validation)
        assert (1 < chance if workload.primary_metric == "val_perplexity" else 0 < chance < 1), config.workload


ENTRY_WITH_ITS_OWN_OPTIMIZER = """
import torch
from amp_suite import UserWorkload


def build(fused: bool = False) -> UserWorkload:
    model = torch.nn.Linear(4, 2)
    data = (torch.randn(16, 4), torch.randint(0, 2, (16,)))
    return UserWorkload(model, train=data, validation=data,
                        optimizer=lambda parameters: torch.optim.SGD(parameters, lr=0.1, fused=fused or None))
"""


def _smoke_workloads() -> list:
    spec = yaml.safe_load((REPO / "experiments" / "smoke.yaml").read_text())
    return Matrix.model_validate(spec).workloads


@pytest.mark.parametrize("fused", [False, True])
def test_every_reference_workload_builds_the_optimizer_implementation_asked_for(fused):
    """fused_optimizer: true gives torch's fused kernel (AdamW's, and the ResNet's SGD's), with the
    workload's own hyperparameters; false leaves the choice to torch (fused unset: foreach on CUDA)."""
    expected = {"resnet": torch.optim.SGD}  # the rest train with AdamW
    for config in _smoke_workloads():
        workload = build_workload(config.model_copy(update={"fused_optimizer": fused}))
        optimizer = workload.make_optimizer(torch.nn.Linear(4, 2))
        assert type(optimizer) is expected.get(config.workload, torch.optim.AdamW), config.workload
        assert optimizer.defaults["fused"] is (True if fused else None), config.workload
        assert optimizer.defaults["lr"] == config.lr
        if config.workload == "resnet":
            assert optimizer.defaults["momentum"] == 0.9 and optimizer.defaults["nesterov"] is True
        if config.workload == "mlp":
            assert optimizer.defaults["eps"] == config.adam_eps


def test_a_users_own_optimizer_must_be_fused_where_fused_is_asked_for(tmp_path):
    """The suite can't make an entry's optimizer fused: it refuses one that isn't, rather than
    record a cell as fused that was not."""
    (tmp_path / "own.py").write_text(ENTRY_WITH_ITS_OWN_OPTIMIZER)
    entry = {"workload": "custom", "entry": f"{tmp_path / 'own.py'}:build", "batch_sizes": [4], "fused_optimizer": True}
    model = torch.nn.Linear(4, 2)
    plain = build_workload(CustomConfig.model_validate(entry))
    with pytest.raises(ValueError, match=r"fused_optimizer: true, but the optimizer built is not fused \(SGD"):
        plain.make_optimizer(model)
    fused = build_workload(CustomConfig.model_validate({**entry, "args": {"fused": True}}))
    assert fused.make_optimizer(model).defaults["fused"] is True
    unasked = build_workload(CustomConfig.model_validate({**entry, "fused_optimizer": False}))
    assert unasked.make_optimizer(model).defaults["fused"] is None  # the entry's choice, as it wrote it
