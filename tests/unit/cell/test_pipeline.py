from __future__ import annotations

import time
from collections import OrderedDict

import pytest
import torch
from conftest import tiny_matrix

from amp_suite.cell import pipeline
from amp_suite.cell import run as cell_module
from amp_suite.cell.loop import Trainer
from amp_suite.cell.pipeline import prepare, step_diagnostics
from amp_suite.cell.run import run_cell
from amp_suite.config import Matrix
from amp_suite.hardware.backends.cpu import CpuBackend
from amp_suite.instruments.diagnostics.flops import count_step_flops
from amp_suite.instruments.diagnostics.underflow import grad_underflow_fraction
from amp_suite.instruments.memory import PeakMemory
from amp_suite.records.machine import cpu_caps
from amp_suite.workloads.resnet import ResNetWorkload

CELLS = {c.precision: c for c in Matrix.model_validate(tiny_matrix(steps=6)).cells("cpu")}
BF16_CPU = cpu_caps("test cpu", frozenset({"avx512_bf16"}))


@pytest.fixture
def bf16_cpu(monkeypatch):
    """Pretend the CPU has native bf16 (and not fp16), whatever this machine has."""
    monkeypatch.setattr(cell_module, "probe", lambda device: BF16_CPU)


def test_fp32_cell_measures_and_describes_itself(bf16_cpu):
    record = run_cell(CELLS["fp32"])
    assert record.status == "ok", record.reason
    assert record.throughput > 0 and record.step_time_ms_p90 >= record.step_time_ms_p50 > 0
    assert len(record.loss_curve) == 6 and record.final_loss == record.loss_curve[-1]
    assert record.matmul_dtype == "float32" and set(record.fp32_math.values()) == {"ieee"}
    assert record.peak_memory_kind == "cpu_peak_rss" and record.peak_memory_mb > 0
    assert record.environment["torch"] and record.environment["device_name"] == "test cpu"
    assert record.val_metric_name == "val_accuracy" and 0.0 <= record.val_metric <= 1.0
    assert record.val_metrics["val_loss"] == record.val_loss > 0
    assert 0.0 <= record.grad_underflow_fraction < 0.5  # ordinary training: little below fp16's floor


def test_precisions_share_initial_weights_and_batch_order(bf16_cpu):
    fp32, bf16 = run_cell(CELLS["fp32"]), run_cell(CELLS["bf16"])
    assert bf16.status == "ok" and bf16.matmul_dtype == "bfloat16"
    assert fp32.batch_order_hash == bf16.batch_order_hash
    assert fp32.data_fingerprint == bf16.data_fingerprint and fp32.data_source == "sklearn:digits"
    assert bf16.loss_curve[0] == pytest.approx(fp32.loss_curve[0], rel=0.05)  # same model, same batch
    assert bf16.loss_curve != fp32.loss_curve  # but not the same arithmetic


def test_evaluating_for_time_to_target_leaves_the_training_untouched_and_the_timed_steps_alone(bf16_cpu, monkeypatch):
    """A ResNet (BatchNorm: eval mode must not move its running statistics) trained with and without
    evaluations every 2 steps: the same losses to the last bit; the evaluations' time is eval_s."""
    matrix = tiny_matrix(steps=6, workloads=[{"workload": "resnet", "arch": "resnet18", "image_size": 32,
                         "num_classes": 10, "batch_sizes": [8], "samples": 64, "data": {"val_samples": 16,
                         "source": "digits"}}])  # fmt: skip
    plain = Matrix.model_validate(matrix).cells("cpu")[0]
    matrix["workloads"][0]["target"] = {"value": 0.5, "eval_every": 2}
    evaluated = Matrix.model_validate(matrix).cells("cpu")[0]
    evaluate = ResNetWorkload.evaluate  # made slow: an evaluation must stay out of the timed steps
    monkeypatch.setattr(ResNetWorkload, "evaluate", lambda *args: (time.sleep(0.2), evaluate(*args))[1])
    without, with_evaluations = run_cell(plain), run_cell(evaluated)
    assert with_evaluations.status == without.status == "ok"
    assert with_evaluations.loss_curve == without.loss_curve
    assert [p.step for p in with_evaluations.eval_curve] == [4, 6, 8]  # after 2, 4 and 6 timed steps (2 warmup)
    assert with_evaluations.eval_curve[-1].metric == with_evaluations.val_metric
    assert with_evaluations.eval_s >= 0.4  # two evaluations between runs of steps; the last is the cell's own
    # Throughput's seconds are the runs' spans: the steps and the gaps between them, not the 0.4 s of sleep.
    timed_s = 6 * with_evaluations.batch_size / with_evaluations.throughput
    assert timed_s == pytest.approx(with_evaluations.eval_curve[-1].train_s)
    assert timed_s < 6 * with_evaluations.step_time_ms_mean / 1e3 + 0.2
    assert without.eval_curve == [] and without.eval_s is None


def test_unsupported_modes_are_skipped_with_a_reason_not_substituted(bf16_cpu):
    tf32, fp16 = run_cell(CELLS["tf32"]), run_cell(CELLS["fp16"])
    assert tf32.status == fp16.status == "skipped"
    assert "TF32" in tf32.reason and "fp16" in fp16.reason
    assert tf32.throughput is None and tf32.matmul_dtype is None


def test_forced_fp16_runs_with_the_scaler_and_says_it_was_forced(bf16_cpu):
    record = run_cell(CELLS["fp16"].model_copy(update={"force": True}))
    assert record.status == "ok" and record.reason.startswith("forced despite")
    assert record.matmul_dtype == "float16" and record.loss_scale > 0 and record.skipped_steps >= 0


def test_a_batch_larger_than_the_training_set_fails_saying_so(bf16_cpu):
    # `samples` caps real data; digits has only 1,437 training samples.
    workload = {**tiny_matrix()["workloads"][0], "batch_sizes": [2048], "samples": 2048}
    (spec,) = Matrix.model_validate(tiny_matrix(precisions=["fp32"], workloads=[workload])).cells("cpu")
    record = run_cell(spec)
    assert record.status == "failed"
    assert record.reason == "ValueError: batch 2048 is larger than the training set (1437 samples)"


RESNET = {
    "workload": "resnet", "arch": "resnet18", "image_size": 32, "num_classes": 10, "batch_sizes": [10],
    "samples": 64, "data": {"source": "synthetic", "val_samples": 16},
}  # fmt: skip
GPT2 = {
    "workload": "transformer", "n_layer": 1, "n_embd": 32, "n_head": 2, "seq_len": 16, "vocab_size": 64,
    "batch_sizes": [10], "samples": 32, "data": {"source": "synthetic", "val_samples": 8},
}  # fmt: skip


# Gradients shrunk until a sixth of them lie below fp16's floor (a slice of 3 samples alone: a tenth).
SMALL_GRADIENTS_MLP = {**tiny_matrix()["workloads"][0], "batch_sizes": [10], "loss_multiplier": 1e-4}


@pytest.mark.parametrize("workload", [SMALL_GRADIENTS_MLP, RESNET, GPT2], ids=["mlp", "resnet", "gpt2"])
def test_the_diagnostics_run_on_a_quarter_of_the_batch_and_count_the_whole_batchs_flops(workload):
    (spec,) = Matrix.model_validate(tiny_matrix(precisions=["bf16"], workloads=[workload])).cells("cpu")
    session = prepare(spec, torch.device("cpu"))
    model, loss, policy, batch = session.model, session.workload.loss, session.policy, session.batches.peek()
    diagnostics = step_diagnostics(model, loss, policy, session.batches)
    assert diagnostics["diagnostics_batch_size"] == 3  # micro-batches of 3, 3, 2 and 2 for batch 10
    assert diagnostics["flops_per_step"] == count_step_flops(model, loss, policy, *batch).matmul  # exactly linear
    whole = grad_underflow_fraction(model, loss, *batch)  # the batch's own gradient, in one backward
    # Accumulated over the micro-batches, the gradient is the batch's (BatchNorm aside), not a slice's.
    assert diagnostics["grad_underflow_fraction"] == pytest.approx(whole, abs=0.005)
    assert whole > 0.1 or workload is not SMALL_GRADIENTS_MLP


def test_a_crashing_cell_is_recorded_failed(bf16_cpu, monkeypatch):
    def explode(config, channels_last=False):
        raise RuntimeError("model construction blew up\nsecond line")

    monkeypatch.setattr(pipeline, "build_workload", explode)
    record = run_cell(CELLS["fp32"])
    assert record.status == "failed" and record.reason == "RuntimeError: model construction blew up"


class GoesNaN(torch.nn.Module):
    """Passes its input through for `after` calls, then turns it into NaN."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.calls = after, 0

    def forward(self, x):
        self.calls += 1
        return x * float("nan") if self.calls > self.after else x


def _poisoned(monkeypatch, after: int) -> None:
    real_build = pipeline.build_workload

    def build(config, channels_last=False):
        workload = real_build(config, channels_last)
        build_model = workload.build_model
        workload.build_model = lambda train: torch.nn.Sequential(
            OrderedDict(body=build_model(train), poison=GoesNaN(after), head=torch.nn.Linear(10, 10))
        )
        return workload

    monkeypatch.setattr(pipeline, "build_workload", build)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_module_that_produces_nan_makes_the_cell_diverged_and_is_named(bf16_cpu, monkeypatch, precision):
    _poisoned(monkeypatch, after=3)  # training steps 0-2 are clean; step 3 is the first NaN
    record = run_cell(CELLS[precision])
    assert record.status == "diverged"
    assert record.nonfinite_step == 3
    assert record.reason == "first non-finite forward output in module 'poison' (GoesNaN) at step 3"


def test_fp16_with_a_scaler_also_names_a_nan_born_in_the_forward_pass(bf16_cpu, monkeypatch):
    _poisoned(monkeypatch, after=4)
    record = run_cell(CELLS["fp16"].model_copy(update={"force": True}))
    assert record.status == "diverged" and "'poison' (GoesNaN) at step 4" in record.reason


def test_a_clean_cell_has_no_nonfinite_step(bf16_cpu):
    record = run_cell(CELLS["bf16"])
    assert record.status == "ok" and record.nonfinite_step is None and record.nonfinite_site is None


def test_fp16_steps_make_the_host_wait_once_and_bf16_and_fp32_never(bf16_cpu):
    fp16 = run_cell(CELLS["fp16"].model_copy(update={"force": True}))  # this CPU has no native fp16
    assert fp16.status == "ok", fp16.reason
    assert fp16.host_syncs_per_step == 1  # GradScaler.step reads the overflow flag
    assert run_cell(CELLS["bf16"]).host_syncs_per_step == 0
    assert run_cell(CELLS["fp32"]).host_syncs_per_step == 0


def test_cached_blocks_are_released_after_the_diagnostics_and_the_peak_reset_after_warmup(bf16_cpu, monkeypatch):
    events: list[str] = []

    def logged(name, function):
        def call(*args, **kwargs):
            events.append(name)
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(pipeline, "count_step_flops", logged("diagnostics", pipeline.count_step_flops))
    monkeypatch.setattr(CpuBackend, "release_cached_blocks", logged("release", CpuBackend.release_cached_blocks))
    monkeypatch.setattr(Trainer, "step", logged("step", Trainer.step))
    monkeypatch.setattr(PeakMemory, "__enter__", logged("peak reset", PeakMemory.__enter__))
    spec = CELLS["fp32"]
    assert run_cell(spec).status == "ok"
    warmup = spec.warmup_steps
    assert events[: 2 + warmup + 1] == ["diagnostics", "release", *["step"] * warmup, "peak reset"]
    assert events[2 + warmup + 1 :] == ["step"] * spec.steps


def test_a_policy_converts_the_model_before_the_optimizer_sees_it(bf16_cpu, monkeypatch):
    """A mode that swaps layers (fp8, say) is one policy: its convert_module's model is the one
    trained, evaluated and stepped by the optimizer, in a whole cell."""
    import copy

    from amp_suite.cell.precision import PrecisionPolicy

    converted = []

    class Swapping(PrecisionPolicy):
        def convert_module(self, model):
            swapped = copy.deepcopy(model)  # new parameters: the optimizer must hold these
            converted.append(swapped)
            return swapped

    monkeypatch.setattr(pipeline, "make_policy", lambda name, device_type: Swapping(device_type))
    session = prepare(CELLS["fp32"], torch.device("cpu"))
    (model,) = converted
    assert session.model is model and session.trainer.model is model
    stepped = {id(p) for group in session.trainer.optimizer.param_groups for p in group["params"]}
    assert stepped == {id(p) for p in model.parameters()}
    assert run_cell(CELLS["fp32"]).status == "ok" and len(converted) == 2  # the whole cell runs on it
