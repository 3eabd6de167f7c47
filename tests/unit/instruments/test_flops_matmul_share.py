"""The share of a training step's arithmetic in matmuls, convolutions and attention: FlopCounterMode's
count beside every other floating-point op, counted one FLOP per output element in the same pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, tiny_matrix
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from amp_suite.cell.pipeline import prepare, step_diagnostics
from amp_suite.cell.precision import make_policy
from amp_suite.config import Matrix
from amp_suite.instruments.diagnostics.flops import OtherArithmetic, count_step_flops
from amp_suite.records.results import ResultsFile

FP32 = make_policy("fp32", "cpu")


def classify(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def test_a_wide_linear_stack_is_nearly_all_matmul():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    flops = count_step_flops(model, classify, FP32, torch.randn(32, 256), torch.randint(0, 10, (32,)))
    assert flops.matmul == 2 * 32 * (256 * 1024 + 1024 * 1024 + 1024 * 10) * 3 - 2 * 32 * 256 * 1024
    assert flops.other > 0 and flops.matmul_share > 0.99


class Elementwise(nn.Module):
    """A tiny matmul, then normalisations, activations and softmaxes over a wide tensor."""

    def __init__(self, width: int = 1024, blocks: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(4, width)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for norm in self.norms:
            h = torch.softmax(F.gelu(norm(h)), dim=-1) * h.shape[-1]
        return h


def test_a_mostly_elementwise_model_is_well_below_half_and_one_without_matmuls_is_none():
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.randint(0, 1024, (16,))
    mostly = count_step_flops(Elementwise(), classify, FP32, x, y)
    assert 0 < mostly.matmul_share < 0.3  # 2 x 16 x 4 x 1024 FLOPs twice, beside 8 blocks of ~6 wide ops

    no_matmul = nn.Sequential(nn.LayerNorm(4), nn.GELU())
    none = count_step_flops(no_matmul, classify, FP32, x, torch.randint(0, 4, (16,)))
    assert none.matmul == 0 and none.other > 0 and none.matmul_share == 0.0


def test_other_counts_one_per_floating_point_output_element_and_nothing_for_data_movement():
    x = torch.randn(8, 16)
    with OtherArithmetic(FlopCounterMode(display=False).flop_registry) as other:
        # Views, copies, conversions, factories, selections and a matmul (FlopCounterMode's): nothing.
        y = x.t().reshape(16, 8).contiguous().to(torch.float64).to(torch.float32).detach()
        torch.zeros(5), torch.empty(3).fill_(1.0), torch.randn(7), torch.ones_like(x), torch.cat([x, x])
        torch.where(x > 0, x, 0.0), x @ x.t()
        nothing = other.flops
        # Arithmetic: 128 + 128 + 128 elements, and a reduction's 16 outputs; the comparison's bools none.
        z = torch.softmax(y.exp() + 1, dim=-1)
        z.sum(dim=1), z > 0.5
    assert nothing == 0
    assert other.flops == 3 * 128 + 16


def test_a_training_step_counts_its_forward_and_backward_elementwise_ops():
    """Linear(16, 32) -> ReLU -> sum on a batch of 8: the forward's ReLU (256) and sum (1), the
    backward's ReLU gradient (256) and bias gradient (32); the weight gradient is a matmul."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
    flops = count_step_flops(model, lambda m, x, y: m(x).sum(), FP32, torch.randn(8, 16), torch.zeros(8))
    assert flops.matmul == 2 * 8 * 16 * 32 * 2  # forward, and the weight gradient
    assert flops.other == 256 + 1 + 256 + 32
    assert flops.matmul_share == pytest.approx(flops.matmul / (flops.matmul + flops.other))


def test_a_depthwise_convolutions_backward_counts_twice_its_forward_as_a_dense_ones_does():
    """torch 2.14.1's rule counted the weight gradient of a grouped convolution `groups` times over."""
    for groups in (1, 32):
        conv = nn.Conv2d(32, 32, 3, padding=1, groups=groups, bias=False)
        x = torch.randn(4, 32, 8, 8, requires_grad=True)
        forward = 2 * 4 * 8 * 8 * 32 * (32 // groups) * 9  # multiply-adds of every output element
        flops = count_step_flops(conv, lambda m, x, y: m(x).sum(), FP32, x, torch.zeros(4))
        assert flops.matmul == 3 * forward  # the forward, the input's gradient, the weight's gradient


def test_attention_on_a_cpu_is_counted_as_its_matmuls():
    """The CPU's fused attention is an op of its own, which FlopCounterMode did not know."""
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    model = nn.Identity()
    flops = count_step_flops(
        model, lambda m, x, y: F.scaled_dot_product_attention(q, k, v).sum(), FP32, torch.zeros(1), torch.zeros(1)
    )
    forward = 2 * (2 * 2 * 4 * 16 * 16 * 8)  # q @ k^T and attention @ v
    # The backward as torch counts a GPU's: the scores again, and four gradients' matmuls.
    assert flops.matmul == forward + 5 * forward // 2


def test_the_diagnostics_record_the_share_and_older_records_still_load():
    (spec,) = Matrix.model_validate(tiny_matrix(precisions=["fp32"])).cells("cpu")
    session = prepare(spec, torch.device("cpu"))
    diagnostics = step_diagnostics(session.model, session.workload.loss, session.policy, session.batches)
    head = [t[: diagnostics["diagnostics_batch_size"]] for t in session.batches.peek()]
    counted = count_step_flops(session.model, session.workload.loss, session.policy, *head)
    assert diagnostics["matmul_flop_share"] == counted.matmul_share and 0.5 < counted.matmul_share < 1

    records, unreadable = ResultsFile(REPO / "tests" / "fixtures" / "results-2026-12-01.jsonl").read()
    assert records and not unreadable and all(r.matmul_flop_share is None for r in records)
