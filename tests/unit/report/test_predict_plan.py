"""What `amp-suite predict` estimates and on which GPUs (report.predict_plan): the default GPUs are
this machine's generation and the published anchors the matrix meets; a mode a GPU can't run is
left out with the reason; tf32 reuses fp32's profile; a user's own model is told no stated error
applies to it."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from conftest import REPO, tiny_matrix

from amp_suite.analysis.roofline import Host
from amp_suite.config import Matrix, load_matrix
from amp_suite.hardware.peaks import estimated_gpus, gpu_spec
from amp_suite.report import predict_plan as plan
from amp_suite.report.cell_profiles import Profiles
from amp_suite.report.references import load_references

REFERENCES = load_references(None)
RESNET = load_matrix(REPO / "experiments" / "nvidia-resnet50.yaml")
HOSTS = (Host("good", 5.0, "assumed"), Host("slow", 47.0, "measured"))


@dataclass(frozen=True)
class Cost:  # one op of a fake profile: a matmul-sized op, one kernel
    phase: str = "forward"
    op: str = "mm"
    dtype: str = "float32"
    flops: int = 10**9
    bytes: int = 10**6
    kernels: int = 1


class FakeProfile:
    def costs(self, compiled: bool) -> list[Cost]:
        return [Cost(), Cost(phase="backward")]


def tiny(**overrides) -> Matrix:
    return Matrix.model_validate(tiny_matrix(**overrides))


def test_the_default_gpus_are_the_published_anchors_the_matrix_meets_and_all_adds_the_rest():
    cells = plan.matrix_cells(RESNET).cells
    choice = plan.default_gpus(cells, REFERENCES, fp8=False, local=None)
    assert choice.gpus == choice.anchors == ["A100-SXM4-80GB", "V100-SXM2"]  # NVIDIA's ResNet-50 figures
    assert choice.own_generation == [] and set(choice.others) == set(estimated_gpus()) - set(choice.gpus)
    with_fp8 = plan.default_gpus(cells, REFERENCES, fp8=True, local=None)
    assert with_fp8.anchors == ["A100-SXM4-80GB", "V100-SXM2", "H100 80GB HBM3"]  # torchao's publisher


def test_a_machine_with_a_gpu_sees_its_own_generation_first():
    cells = plan.matrix_cells(RESNET).cells
    choice = plan.default_gpus(cells, REFERENCES, fp8=False, local="NVIDIA H100 80GB HBM3")
    assert choice.own_generation == ["H100 PCIe", "H100 80GB HBM3", "H200"]  # compute capability 9.0
    assert choice.gpus == [*choice.own_generation, "A100-SXM4-80GB", "V100-SXM2"]
    unknown = plan.default_gpus(cells, REFERENCES, fp8=False, local="Some GPU the table lacks")
    assert unknown.own_generation == []


def test_a_matrix_that_meets_no_published_figure_is_estimated_on_every_gpu_that_has_one():
    choice = plan.default_gpus(plan.matrix_cells(tiny()).cells, REFERENCES, fp8=False, local=None)
    assert choice.anchors == ["A100-SXM4-80GB", "A100-SXM4-40GB", "V100-SXM2"]


def test_fp8_is_in_question_for_an_fp8_mode_or_a_kernel_benchmark_only():
    assert not plan.fp8_in_question(RESNET) and not plan.fp8_in_question(tiny())
    assert plan.fp8_in_question(tiny(precisions=["bf16", "fp8-tensorwise"], compile=["default"]))
    assert plan.fp8_in_question(load_matrix(REPO / "experiments" / "torchao-float8.yaml"))


def test_cells_a_roofline_cant_estimate_are_left_out_with_the_reason():
    chosen = plan.matrix_cells(tiny(precisions=["bf16", "fp8-tensorwise"], compile=[False, "max-autotune"]))
    assert {(spec.precision, spec.compile) for spec in chosen.cells} == {("bf16", "off")}
    assert "fp8 training runs under torch.compile" in chosen.left_out["fp8-tensorwise eager"]
    assert "CUDA graphs and autotuned kernels" in chosen.left_out["bf16 compiled (max-autotune)"]


def test_a_gpu_leaves_out_the_modes_it_cant_run_and_tf32_reuses_fp32s_profile():
    profiled = []
    profiles = Profiles(profile=lambda spec: profiled.append(spec.precision) or FakeProfile())
    cells = plan.matrix_cells(tiny()).cells
    v100 = plan.estimate_on("V100-SXM2", gpu_spec("V100-SXM2"), cells, profiles, HOSTS, [])
    assert set(v100.left_out) == {"tf32", "bf16"} and "7.0" in v100.left_out["bf16"]
    assert [e.precision for e in v100.estimates] == ["fp32", "fp16"]
    assert [e.step.launch_us for e in v100.slow] == [47.0, 47.0]  # the slow host's figure
    assert list(v100.speedups) == ["fp32", "tf32"] and v100.speedups["fp32"][0] is None  # the baseline
    a100 = plan.estimate_on("A100-SXM4-80GB", gpu_spec("A100-SXM4-80GB"), cells, profiles, HOSTS, [])
    assert [e.precision for e in a100.estimates] == ["fp32", "tf32", "fp16", "bf16"]
    assert sorted(profiled) == ["bf16", "fp16", "fp32"]  # each made once; tf32 runs fp32's ops
    assert a100.speedups["tf32"][0].estimated == pytest.approx(1 / a100.speedups["fp32"][1].estimated)


def test_the_published_speedups_on_a_gpu_are_held_against_its_good_hosts_estimates():
    profiles = Profiles(profile=lambda spec: FakeProfile())
    published = [f for f in plan.published_speedups(REFERENCES) if f.model == "resnet50"]
    cells = plan.matrix_cells(tiny()).cells
    on = plan.estimate_on("V100-SXM2", gpu_spec("V100-SXM2"), cells, profiles, HOSTS, published)
    assert on.calibrations and all(c.estimated is None for c in on.calibrations)  # the tiny MLP meets none
    assert plan.mean_error(on.calibrations) == (0, None)


def test_a_users_own_model_is_told_no_stated_error_applies_to_it():
    own = SimpleNamespace(name="cnn", entry="models/cnn.py:build")
    line = plan.stated_error_line([own], REFERENCES, measured=True)
    assert line.startswith("stated error: none applies to cnn (your own model)")
    assert "resnet50" in line and "bert-large" in line and "your records" in line
    assert "predict --results" in plan.stated_error_line([own], REFERENCES, measured=False)
    assert plan.stated_error_line(RESNET.workloads, REFERENCES, measured=False) is None


def test_what_is_profiled_is_said_in_one_line():
    words = plan.profiling_words("nvidia-resnet50", plan.matrix_cells(RESNET).cells)
    assert words.endswith("resnet50-nchw at batch 112, 256; resnet50-nhwc (channels_last) at batch 256")
