from __future__ import annotations

import pytest
import torch
from conftest import tiny_matrix

from amp_suite.cell.pipeline import prepare
from amp_suite.config import Matrix
from amp_suite.hardware.peaks import peak_tflops, utilisation
from amp_suite.instruments.diagnostics.flops import count_step_flops

MLP = {"workload": "mlp", "in_features": 64, "hidden": 256, "depth": 3, "num_classes": 10,
       "batch_sizes": [32], "samples": 64, "data": {"source": "synthetic", "val_samples": 32}}  # fmt: skip


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_mlps_counted_flops_match_the_analytic_count_of_its_linear_layers(precision):
    (spec,) = Matrix.model_validate(tiny_matrix(precisions=[precision], workloads=[MLP])).cells("cpu")
    session = prepare(spec, torch.device("cpu"))
    model, batch = session.trainer.model, session.batches.peek()
    counted = count_step_flops(model, session.workload.loss, session.policy, *batch).matmul

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

    from amp_suite.hardware.peaks import PEAKS_FILE

    entries = yaml.safe_load(PEAKS_FILE.read_text())["gpus"]
    with_peaks = [entry for entry in entries if any(entry["peak_tflops"].values())]  # the rest guard names only
    assert len(with_peaks) >= 8
    assert all(entry["source"]["document"] and entry["source"]["url"].startswith("https://") for entry in with_peaks)
    assert peak_tflops("NVIDIA RTX A1000", "fp16") is None  # not an A100, though its name contains one
    assert peak_tflops("NVIDIA GH200 480GB", "bf16") is None  # not an H200


@pytest.mark.parametrize(
    ("device_name", "precision", "expected"),
    [
        # H200: tf32 / fp16 from the product page's sparse figures, halved
        ("NVIDIA H200", "tf32", 494.5),
        ("NVIDIA H200", "fp16", 989.5),
        ("NVIDIA H200", "bf16", 989.5),
        ("NVIDIA H200 NVL", "tf32", 417.5),
        ("NVIDIA H200 NVL", "fp16", 835.5),
        ("NVIDIA H200 NVL", "fp32", 60),
        # fp8: the product page's FP8 Tensor Core row (3,958 / 3,341 with sparsity), halved
        ("NVIDIA H200", "fp8-rowwise", 1979),
        ("NVIDIA H200 NVL", "fp8-tensorwise", 1670.5),
        # ... and the datasheets' for H100, L4 (sparse figures halved) and L40S (printed dense)
        ("NVIDIA H100 80GB HBM3", "fp8-rowwise", 1979),
        ("NVIDIA H100 PCIe", "fp8-tensorwise", 1513),
        ("NVIDIA H100 NVL", "fp8-rowwise", 1670.5),
        ("NVIDIA L4", "fp8-tensorwise", 242.5),
        ("NVIDIA L40S", "fp8-tensorwise", 733),
        ("NVIDIA L40S", "bf16", 362.05),
        ("NVIDIA L40", "bf16", None),  # the L40's own figures were not checked: not the L40S's, nor the L4's
        ("NVIDIA B200", "fp8-tensorwise", None),  # NVIDIA's documents disagree on its dense figure
        # V100: SXM2, PCIe and V100S each get their own column; no TF32/BF16 tensor cores
        ("Tesla V100-SXM2-32GB", "fp16", 125),
        ("Tesla V100-PCIE-16GB", "fp32", 14),
        ("Tesla V100-PCIE-32GB", "fp16", 112),
        ("Tesla V100S-PCIE-32GB", "fp32", 16.4),
        ("Tesla V100S-PCIE-32GB", "fp16", 130),
        ("Tesla V100S-PCIE-32GB", "fp16-noscale", 130),
        ("Tesla V100-PCIE-16GB", "bf16", None),
        ("Tesla V100S-PCIE-32GB", "tf32", None),
        ("Tesla V100-FHHL-16GB", "fp16", None),  # the 150 W card: not checked, not listed
        # T4
        ("Tesla T4", "fp32", 8.1),
        ("Tesla T4", "fp16", 65),
        ("Tesla T4", "bf16", None),
        # H100: each name torch reports goes to its own column, or to a guard
        ("NVIDIA H100 80GB HBM3", "bf16", 989.5),
        ("NVIDIA H100 PCIe", "bf16", 756.5),
        ("NVIDIA H100 NVL", "bf16", 835.5),
        ("NVIDIA H100 NVL", "tf32", 417.5),
        ("NVIDIA H100 NVL", "fp32", 60),
        ("NVIDIA H100", "bf16", None),  # no form factor in the name: SXM, PCIe and NVL differ
        ("NVIDIA H100", "fp32", None),
        ("NVIDIA H100 96GB HBM3", "bf16", None),  # an H100 spelling whose figures were not checked
    ],
)
def test_each_reported_device_name_gets_its_own_peak_or_none(device_name, precision, expected):
    peak = peak_tflops(device_name, precision)
    assert peak == (pytest.approx(expected) if expected is not None else None)


def test_no_entry_is_shadowed_by_an_earlier_match():
    # Each entry's own match string, looked up as a device name, must land on that entry: an
    # earlier, shorter match that is a substring of it would silently claim its devices.
    from amp_suite.hardware.peaks import _table

    table = _table()
    for index, (match, entry) in enumerate(table):
        peaks = entry["peak_tflops"]
        first = next(i for i, (other, _) in enumerate(table) if other in match)
        assert first == index, f"{match!r} is claimed by the earlier entry {table[first][0]!r}"
        for mode in ("fp32", "tf32", "fp16", "bf16"):
            value = peaks.get(mode)
            assert peak_tflops(match.upper(), mode) == (float(value) if value else None), (match, mode)
