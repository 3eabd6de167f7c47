from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from amp_suite.cell.precision import BF16
from amp_suite.cli import app
from amp_suite.instruments.diagnostics.dtype_audit import audit_step


def _inspect(workload: str, precision: str) -> dict:
    done = CliRunner().invoke(
        app, ["inspect", "--workload", workload, "--precision", precision, "--json", "--device", "cpu"]
    )
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)  # transformers may log to stderr


def _forward(audit: dict, op: str) -> dict:
    return next(o for o in audit["ops"] if o["phase"] == "forward" and o["op"] == op)


def test_mlp_bf16_lowers_linear_keeps_cross_entropy_and_parameters_in_float32():
    audit = _inspect("mlp", "bf16")
    assert _forward(audit, "addmm")["output_dtypes"] == ["bfloat16"]  # nn.Linear
    assert _forward(audit, "addmm")["ran_in"] == "lower"
    assert _forward(audit, "_log_softmax")["output_dtypes"] == ["float32"]  # cross-entropy
    assert _forward(audit, "nll_loss_forward")["output_dtypes"] == ["float32"]
    assert audit["checks"] == {
        "parameters_float32": True,
        "gradients_float32": True,
        "loss_float32": True,
        "matmul_conv_in_compute_dtype": True,
    }


@pytest.mark.parametrize("workload, op", [("transformer", "addmm"), ("resnet", "convolution")])
def test_inspect_works_for_every_workload(workload, op):
    audit = _inspect(workload, "bf16")
    assert _forward(audit, op)["output_dtypes"] == ["bfloat16"]
    assert all(audit["checks"].values())


def test_fp32_runs_everything_in_float32():
    audit = _inspect("mlp", "fp32")
    assert {o["ran_in"] for o in audit["ops"]} <= {"float32", "other"}
    assert audit["checks"]["matmul_conv_in_compute_dtype"]


def test_the_check_fails_when_autocast_did_not_lower_the_matmuls():
    class ForgetsAutocast(BF16):  # claims bf16 but never enters autocast
        def forward_context(self):
            return torch.autocast("cpu", enabled=False)

    model = torch.nn.Linear(4, 2)
    audit = audit_step(model, lambda m, x, y: m(x).float().sum(), ForgetsAutocast("cpu"), torch.ones(3, 4), None)
    assert audit["checks"]["matmul_conv_in_compute_dtype"] is False
    assert audit["checks"]["parameters_float32"] and model.weight.grad is None  # the model itself is untouched


def test_unknown_workload_or_precision_is_a_one_line_error():
    runner = CliRunner()
    for args, expected in ((["--workload", "vit", "--precision", "bf16"], "--workload: no workload 'vit'"),
                           (["--workload", "mlp", "--precision", "fp8"], "--precision: unknown 'fp8'")):  # fmt: skip
        done = runner.invoke(app, ["inspect", *args, "--device", "cpu"])
        assert done.exit_code == 2 and expected in done.output


def test_fp8s_float8_matmuls_are_listed_and_checked(tmp_path):
    """torch._scaled_mm runs below torchao's tensor subclass, out of a dispatch mode's sight: the audit
    counts it from torch._scaled_mm itself (this CPU's kernel is software, but the calls are real)."""
    import torch
    from torch.nn import functional as F

    from amp_suite.cell.precision import make_policy
    from amp_suite.instruments.diagnostics.dtype_audit import audit_step

    policy = make_policy("fp8-rowwise", "cpu")
    model = policy.convert_module(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                                      torch.nn.Linear(256, 16)))  # fmt: skip
    audit = audit_step(model, lambda m, x, y: F.cross_entropy(m(x), y), policy, torch.randn(32, 64),
                       torch.randint(0, 16, (32,)))  # fmt: skip
    scaled = {(op["phase"], op["calls"], op["ran_in"]) for op in audit["ops"] if op["op"] == "_scaled_mm"}
    assert scaled == {("forward", 2, "float8"), ("backward", 4, "float8")}  # two layers; grad input + weight each
    assert audit["checks"]["fp8_scaled_matmuls"] is True
    bf16 = audit_step(model, lambda m, x, y: F.cross_entropy(m(x), y), make_policy("bf16", "cpu"),
                      torch.randn(32, 64), torch.randint(0, 16, (32,)))  # fmt: skip
    assert "fp8_scaled_matmuls" not in bf16["checks"]
