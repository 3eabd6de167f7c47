from __future__ import annotations

import pytest
import torch
from conftest import tiny_matrix

from amp_suite.cell import prepare
from amp_suite.config import Matrix
from amp_suite.diagnostics.flops import count_step_flops
from amp_suite.peaks import peak_tflops, utilisation

MLP = {"workload": "mlp", "in_features": 64, "hidden": 256, "depth": 3, "num_classes": 10,
       "batch_sizes": [32], "samples": 64, "data": {"source": "synthetic", "val_samples": 32}}  # fmt: skip


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_mlps_counted_flops_match_the_analytic_count_of_its_linear_layers(precision):
    (spec,) = Matrix.model_validate(tiny_matrix(precisions=[precision], workloads=[MLP])).cells("cpu")
    session = prepare(spec, torch.device("cpu"))
    counted = count_step_flops(session.trainer.model, session.workload.loss, session.policy, *session.batches.peek())

    batch, shapes = 32, [(64, 256), (256, 256), (256, 256), (256, 10)]
    forward = sum(2 * batch * fan_in * fan_out for fan_in, fan_out in shapes)
    # Backward: a weight gradient for every layer, an input gradient for all but the first (the
    # data needs none): each as many FLOPs as the layer's forward.
    analytic = forward + forward + (forward - 2 * batch * 64 * 256)
    assert counted == analytic  # 27,754,496 for fp32 and bf16 alike
    assert counted == pytest.approx(3 * forward, rel=0.05)  # "forward plus backward" of a linear stack


def test_mfu_only_where_a_peak_is_published():
    assert utilisation("cpu", "Intel(R) Xeon(R) Processor", "bf16", 1.0) == {"peak_tflops": None, "mfu": None}
    assert utilisation("cuda", "Some Future GPU", "bf16", 1.0) == {"peak_tflops": None, "mfu": None}
    peak = peak_tflops("NVIDIA A100-SXM4-80GB", "bf16")
    assert peak is not None and peak > 100  # the table's dense bf16 tensor-core peak
    assert utilisation("cuda", "NVIDIA A100-SXM4-80GB", "bf16", peak / 2)["mfu"] == pytest.approx(0.5)
    assert peak_tflops("Tesla V100-SXM2-16GB", "bf16") is None  # no bf16 tensor cores: no peak, no MFU


def test_every_peak_names_its_source_and_longer_names_are_matched_first():
    import yaml

    from amp_suite.peaks import PEAKS_FILE

    entries = yaml.safe_load(PEAKS_FILE.read_text())["gpus"]
    with_peaks = [entry for entry in entries if any(entry["peak_tflops"].values())]  # the rest guard names only
    assert len(with_peaks) >= 8
    assert all(entry["source"]["document"] and entry["source"]["url"].startswith("https://") for entry in with_peaks)
    assert peak_tflops("NVIDIA RTX A1000", "fp16") is None  # not an A100, though its name contains one
    assert peak_tflops("NVIDIA GH200 480GB", "bf16") is None  # not an H200
