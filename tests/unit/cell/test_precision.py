from __future__ import annotations

from unittest import mock

import pytest
import torch

from amp_suite.cell.precision import (
    BF16,
    FP16,
    POLICIES,
    TF32,
    FP8RowWise,
    FP8TensorWise,
    PrecisionPolicy,
    fp32_math,
    make_policy,
    observed_matmul_dtype,
)
from amp_suite.records.machine import cpu_caps, cuda_caps

AMPERE, VOLTA, PASCAL = cuda_caps("A100", (8, 0)), cuda_caps("V100", (7, 0)), cuda_caps("P100", (6, 0))
ADA, HOPPER = cuda_caps("L40S", (8, 9)), cuda_caps("H100", (9, 0))
PLAIN_CPU = cpu_caps("cpu", frozenset({"avx2"}))


def _model_and_optimizer():
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_fp32_is_plain_backward_and_step():
    policy = make_policy("fp32", "cpu")
    loss = mock.Mock()
    optimizer = mock.Mock()
    policy.backward(loss)
    policy.unscale_gradients(optimizer)
    policy.optimizer_step(optimizer)
    loss.backward.assert_called_once_with()
    optimizer.step.assert_called_once_with()
    assert policy.telemetry() == {}  # no scaler, nothing to report
    assert not torch.is_autocast_enabled("cpu")
    with policy.forward_context():
        assert not torch.is_autocast_enabled("cpu")


def test_bf16_autocasts_forward_but_steps_without_a_scaler():
    policy = make_policy("bf16", "cpu")
    assert not hasattr(policy, "scaler")
    with policy.forward_context():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    loss, optimizer = mock.Mock(), mock.Mock()
    policy.backward(loss)
    policy.optimizer_step(optimizer)
    loss.backward.assert_called_once_with()
    optimizer.step.assert_called_once_with()


def test_fp16_drives_the_scaler_in_the_recipe_order():
    scaler = mock.MagicMock()  # subscriptable: the policy reads the step's inf/NaN flags from its state
    policy = FP16("cpu", scaler=scaler)
    loss, optimizer = mock.Mock(), mock.Mock()
    policy.backward(loss)
    policy.unscale_gradients(optimizer)
    policy.optimizer_step(optimizer)
    calls = [c[0] for c in scaler.mock_calls if not c[0].startswith("_")]  # its state read for telemetry
    assert calls == ["scale", "scale().backward", "unscale_", "step", "update"]
    scaler.scale.assert_called_once_with(loss)
    scaler.unscale_.assert_called_once_with(optimizer)
    scaler.step.assert_called_once_with(optimizer)
    loss.backward.assert_not_called()  # only the scaled loss is backpropagated
    optimizer.step.assert_not_called()  # the scaler decides whether to step


def test_fp16_counts_the_steps_the_scaler_skipped():
    model, optimizer = _model_and_optimizer()
    # 2**10, not the default 2**16: an upstream gradient of 65536 would itself overflow float16.
    policy = FP16("cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
    policy.bind(optimizer)
    for poisoned in (False, True, False):
        optimizer.zero_grad()
        with policy.forward_context():
            loss = model(torch.ones(1, 4)).float().sum() * (float("inf") if poisoned else 1.0)
        policy.backward(loss)
        policy.unscale_gradients(optimizer)
        policy.optimizer_step(optimizer)
    telemetry = policy.telemetry()
    assert telemetry["skipped_steps"] == 1
    assert telemetry["loss_scale"] == 512.0  # halved once, after the overflow
    assert telemetry["loss_scale_curve"] == [1024.0, 512.0, 512.0]
    assert telemetry["loss_scale_drops"] == 1 and telemetry["loss_scale_warning"] is False


def _fp16_steps(optimizer, model, poisoned_steps, policy=None):
    """fp16 steps through the recipe, the loss made inf on the steps named; a new policy is bound first."""
    if policy is None:
        policy = FP16("cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
        policy.bind(optimizer)
    for step in range(max(poisoned_steps, default=0) + 2):
        optimizer.zero_grad()
        with policy.forward_context():
            loss = model(torch.ones(1, 4)).float().sum() * (float("inf") if step in poisoned_steps else 1.0)
        policy.backward(loss)
        policy.unscale_gradients(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # after unscale_, as the loop clips
        policy.optimizer_step(optimizer)
    return policy


@pytest.mark.parametrize("fused", [None, True])
@pytest.mark.parametrize("kind", [torch.optim.SGD, torch.optim.AdamW])
def test_fp16_counts_skipped_steps_whether_or_not_the_optimizer_is_fused(kind, fused):
    """A fused optimizer's step() always runs (its kernel skips the update on the device): the count
    comes from GradScaler's inf/NaN flags, not from whether step() was called."""
    model = torch.nn.Linear(4, 2)
    optimizer = kind(model.parameters(), lr=0.1, fused=fused)
    assert getattr(optimizer, "_step_supports_amp_scaling", False) is bool(fused)  # the scaler's fused path
    before = model.weight.detach().clone()
    policy = _fp16_steps(optimizer, model, poisoned_steps={0})  # the first step overflows, then two clean ones
    telemetry = policy.telemetry()
    assert telemetry["skipped_steps"] == 1 and telemetry["loss_scale_drops"] == 1
    assert not torch.equal(model.weight, before)  # the clean steps did train


@pytest.mark.parametrize("kind", [torch.optim.SGD, torch.optim.AdamW])
def test_a_skipped_fused_step_leaves_the_weights_as_they_were(kind):
    model = torch.nn.Linear(4, 2)
    optimizer = kind(model.parameters(), lr=0.1, fused=True)
    policy = _fp16_steps(optimizer, model, poisoned_steps=set())  # two clean steps: the state exists
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.zero_grad()
    with policy.forward_context():
        loss = model(torch.ones(1, 4)).float().sum() * float("inf")
    policy.backward(loss)
    policy.unscale_gradients(optimizer)
    policy.optimizer_step(optimizer)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    assert policy.telemetry()["skipped_steps"] == 1


def test_a_fused_optimizer_takes_fp16s_step_without_a_host_sync():
    """GradScaler.step reads the inf/NaN flag on the host (a sync on a GPU) for torch's default
    optimizers, and hands it to a fused one's kernel instead. On a CPU the count is of the reads that
    would sync on a GPU (instruments.diagnostics.host_syncs): one a step, then none."""
    from amp_suite.hardware.backends import backend_of
    from amp_suite.instruments.diagnostics.host_syncs import count_host_syncs

    counted = {}
    for fused in (None, True):
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused)
        policy = _fp16_steps(optimizer, model, poisoned_steps=set())  # the optimizer's state exists
        with count_host_syncs(backend_of("cpu"), optimizer) as syncs:
            _fp16_steps(optimizer, model, poisoned_steps=set(), policy=policy)
        counted[fused] = syncs.count / 2  # per step: _fp16_steps took two
    assert counted == {None: 1, True: 0}


def test_a_scale_that_keeps_dropping_raises_the_warning():
    model, optimizer = _model_and_optimizer()
    policy = FP16("cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
    policy.bind(optimizer)
    for step in range(8):  # clean steps, then overflow on every one: a persistent inf
        optimizer.zero_grad()
        with policy.forward_context():
            loss = model(torch.ones(1, 4)).float().sum() * (float("inf") if step >= 4 else 1.0)
        policy.backward(loss)
        policy.unscale_gradients(optimizer)
        policy.optimizer_step(optimizer)
    telemetry = policy.telemetry()
    assert telemetry["loss_scale_drops"] == 4 and telemetry["skipped_steps"] == 4
    assert telemetry["loss_scale_warning"] is True


@pytest.mark.parametrize(
    "name, dtype", [("fp32", torch.float32), ("tf32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_observed_matmul_dtype_proves_what_ran(name, dtype):
    assert observed_matmul_dtype(make_policy(name, "cpu"), torch.device("cpu")) == dtype


def test_fp32_math_sets_and_restores_every_switch():
    before = torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision
    with fp32_math("tf32") as seen:
        assert set(seen.values()) == {"tf32"}
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    with pytest.raises(RuntimeError), fp32_math("ieee"):
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"
        raise RuntimeError("restored even on error")
    assert (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision) == before


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_keeps_the_legacy_tf32_getters_working(name):
    """Inductor's autotuning calls torch.get_float32_matmul_precision(), which raises ("a mix of
    the legacy and new APIs") when only the fp32_precision API was set; its conv templates read
    the cuDNN backend's own default."""
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    with POLICIES[name]("cuda").numerics():
        tf32 = POLICIES[name].fp32_math_mode == "tf32"
        assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")
        assert torch.backends.cuda.matmul.allow_tf32 is tf32
        assert torch.backends.cudnn.allow_tf32 is tf32
        assert torch.backends.cudnn.fp32_precision == ("tf32" if tf32 else "ieee")
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before


def test_fp32_turns_tf32_off_and_tf32_turns_it_on():
    with PrecisionPolicy("cuda").numerics() as fp32:
        assert fp32["cuda.matmul"] == "ieee" and fp32["cudnn.conv"] == "ieee"
    with TF32("cuda").numerics() as tf32:
        assert tf32["cuda.matmul"] == "tf32" and tf32["cudnn.conv"] == "tf32"


@pytest.mark.parametrize(
    "policy, caps, runs",
    [
        (TF32, AMPERE, True),
        (TF32, VOLTA, False),
        (TF32, PLAIN_CPU, False),
        (BF16, AMPERE, True),
        (BF16, VOLTA, False),
        (BF16, PLAIN_CPU, False),
        (FP16, VOLTA, True),
        (FP16, PASCAL, False),
        (FP16, PLAIN_CPU, False),
        (PrecisionPolicy, PASCAL, True),
        (FP8TensorWise, ADA, True),
        (FP8TensorWise, AMPERE, False),
        (FP8TensorWise, PLAIN_CPU, False),
        (FP8RowWise, HOPPER, True),
        (FP8RowWise, ADA, False),  # row-wise scales: Hopper on
    ],
)
def test_hardware_requirements(policy, caps, runs):
    reason = policy(caps.type).unsupported_reason(caps)
    assert (reason is None) == runs
    if reason:
        assert caps.capability_str in reason if caps.capability else "CPU" in reason


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown precision 'fp4'"):
        make_policy("fp4", "cpu")


def test_a_mode_the_config_accepts_without_a_policy_stops_the_import():
    """The guard at the end of amp_suite.cell.precision: a mode added to config.precisions alone."""
    import subprocess
    import sys

    add_a_mode = (
        "import amp_suite.config.precisions as p; p.PRECISIONS = (*p.PRECISIONS, 'fp4');"
        " import amp_suite.cell.precision"
    )
    done = subprocess.run([sys.executable, "-c", add_a_mode], capture_output=True, text=True)
    assert done.returncode != 0 and "do not match config.PRECISIONS" in done.stderr, done.stderr[-500:]


def test_fp16_noscale_is_fp16_autocast_with_a_plain_backward():
    policy = make_policy("fp16-noscale", "cpu")
    assert not hasattr(policy, "scaler")
    with policy.forward_context():
        assert torch.get_autocast_dtype("cpu") == torch.float16
    loss, optimizer = mock.Mock(), mock.Mock()
    policy.backward(loss)
    policy.optimizer_step(optimizer)
    loss.backward.assert_called_once_with()
    optimizer.step.assert_called_once_with()
    assert policy.unsupported_reason(VOLTA) is None and policy.unsupported_reason(PASCAL)


# -- fp8 (torchao.float8): its conversion and its proof run on this CPU, whose torch._scaled_mm is a
# software kernel; the cells themselves are skipped here unless forced.


@pytest.mark.parametrize("name", ["fp8-tensorwise", "fp8-rowwise"])
def test_fp8_swaps_the_linear_layers_that_fit_float8_and_says_which_it_left(name):
    policy = make_policy(name, "cpu")
    model = policy.convert_module(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                                      torch.nn.Linear(256, 10)))  # fmt: skip
    assert [type(m).__name__ for m in model] == ["Float8Linear", "ReLU", "Linear"]
    assert policy.telemetry() == {"fp8_layers": 1, "fp8_layers_left_out": ["2"]}  # 10 classes: not a multiple of 16
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay float32
    # The proof of mode: a Float8Linear under the policy reaches torch._scaled_mm with float8 operands.
    assert policy.checked_matmul_dtype(torch.device("cpu")) == torch.float8_e4m3fn


def test_fp8_that_never_reaches_a_float8_matmul_fails_its_proof(monkeypatch):
    """A platform (or a torchao) that multiplied in a wider type would be measured as fp8: it fails."""
    import torchao.float8.float8_ops as ops

    def widened(a, b, *args, **kwargs):  # FIXTURE: a fallback, not torchao's behaviour here
        return (a.float() @ b.float()).to(kwargs.get("out_dtype") or torch.float32)

    monkeypatch.setattr(ops, "addmm_float8_unwrapped", lambda a, sa, b, sb, dtype, **kw: widened(a, b, out_dtype=dtype))
    with pytest.raises(RuntimeError, match="no float8 matmul ran on cpu"):
        make_policy("fp8-tensorwise", "cpu").checked_matmul_dtype(torch.device("cpu"))


def test_fp8_runs_compiled_only():
    policy = make_policy("fp8-tensorwise", "cuda")
    assert "compile: [default]" in policy.unsupported_compile("off")
    assert policy.unsupported_compile("default") is None
    assert make_policy("bf16", "cuda").unsupported_compile("off") is None
