"""A record's workload config read back: its metric's label, declared by the config beside its
throughput unit (amp_suite.config.recorded)."""

from __future__ import annotations

import pytest
from conftest import EXPERIMENTS, tiny_matrix

from amp_suite.config import Matrix, load_matrix
from amp_suite.config.recorded import metric_label_of, recorded_workload
from amp_suite.config.workloads import WORKLOAD_CONFIGS, CustomConfig, HfConfig

# What the terminal printed for each reference workload's metric before the labels moved to the
# configs (cli/display.py's table): the labels must stay these.
PRINTED = {"resnet": "acc", "transformer": "ppl", "bert": "mlm acc", "t5": "token acc", "mlp": "acc"}
HF_PRINTED = {"causal-lm": "ppl", "masked-lm": "mlm acc", "seq-cls": "acc", "seq2seq": "token acc"}


def recorded(workload: dict) -> dict:
    """A workload config as its records hold it (config["workload"] of a cell's dump)."""
    cell = Matrix.model_validate(tiny_matrix(workloads=[workload], precisions=["fp32"])).cells("cpu")[0]
    return cell.model_dump(mode="json")["workload"]


def test_every_workload_config_declares_its_metric_label():
    for config in WORKLOAD_CONFIGS:
        declared = config.metric_label
        if config is CustomConfig:
            assert declared is None  # the entry names its metric
        elif config.kernel_benchmark:
            assert declared is None  # a benchmark of kernels learns nothing: no metric
        elif config is not HfConfig:  # a property of its task
            assert isinstance(declared, str) and declared, config.__name__


def test_reference_workloads_keep_their_labels():
    for workload in load_matrix(EXPERIMENTS / "smoke.yaml").workloads:
        config = recorded(workload.model_dump(mode="json"))
        assert metric_label_of(config, "val_any") == PRINTED[workload.workload]


@pytest.mark.parametrize("task", sorted(HF_PRINTED))
def test_a_hugging_face_model_is_labelled_as_its_task(task):
    config = recorded({"workload": "hf", "model": "org/tiny", "task": task, "batch_sizes": [8]})
    assert metric_label_of(config, "val_any") == HF_PRINTED[task]


def test_models_by_name_are_classifiers():
    for workload in ("torchvision", "timm"):
        config = recorded({"workload": workload, "model": "resnet18", "batch_sizes": [8]})
        assert metric_label_of(config, "val_accuracy") == "acc"


def test_a_users_metric_is_labelled_by_its_name():
    config = recorded({"workload": "custom", "entry": "models.cnn:build", "batch_sizes": [8]})
    assert metric_label_of(config, "val_dice") == "dice"
    assert metric_label_of(config, "val_accuracy") == "accuracy"


def test_a_config_that_no_longer_validates_falls_back_to_the_metric_name():
    assert recorded_workload({"workload": "resnet", "arch": "resnet9000"}) is None
    assert metric_label_of({"workload": "resnet", "arch": "resnet9000"}, "val_accuracy") == "accuracy"
    assert metric_label_of(None, "val_perplexity") == "perplexity"  # a record without a config


def test_a_recorded_config_reads_back_as_the_one_that_ran():
    workload = load_matrix(EXPERIMENTS / "smoke.yaml").workloads[1]
    config = recorded(workload.model_dump(mode="json"))
    assert recorded_workload(config) == workload
    assert recorded_workload(dict(reversed(config.items()))) is recorded_workload(config)  # parsed once
