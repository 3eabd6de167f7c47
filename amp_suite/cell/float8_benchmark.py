"""torchao's float8 single-linear microbenchmark as an op profile: the program behind its published
H100 speedups (references/torchao-float8.yaml), which `amp-suite predict` estimates.

The program is torchao's own (benchmarks/float8/float8_roofline.py at 0cf1281a38bd): LayerNorm
without affine, a Linear without bias, a Sigmoid, with bfloat16 weights and input; compiled; a
forward and a backward, no optimizer. Once as written, once with the Linear swapped for a
Float8Linear with dynamic tensorwise scaling (torchao's default recipe, the suite's
fp8-tensorwise). Its time is the sum of the compiled forward's and backward's GPU kernel times:
no host in it, and not the `sum` it backpropagates from, the ones it seeds the backward with, or
the gradients' accumulation (benchmarks/float8/utils.py filters those out). So the profile is the
model's forward, then its backward from a gradient already in memory.
"""

from __future__ import annotations

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from amp_suite.cell.precision import make_policy
from amp_suite.instruments.diagnostics.op_costs import StepProfile
from amp_suite.instruments.diagnostics.op_profile import OpProfiler

BENCHMARK = "torchao-float8-linear"  # the `benchmark` of its references' configs
BF16, FP8 = "bf16", "fp8-tensorwise"  # the two sides of a published speedup, as the suite names them


class LNLinearSigmoid(nn.Module):
    """The benchmark's model, in bfloat16 (built in it: FakeTensorMode can't convert parameters)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(in_features, elementwise_affine=False, dtype=torch.bfloat16)
        self.fc = nn.Linear(in_features, out_features, bias=False, dtype=torch.bfloat16)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sigmoid(self.fc(self.ln(x)))


def profile_benchmark(m: int, k: int, n: int, precision: str) -> StepProfile:
    """The benchmark's step at forward shapes M x K @ K x N, in bf16 or fp8-tensorwise, on fake tensors."""
    if precision not in (BF16, FP8):
        raise ValueError(f"torchao's benchmark runs {BF16} or {FP8}, not {precision!r}")
    profiler = OpProfiler()
    with FakeTensorMode():
        model = LNLinearSigmoid(k, n)
        if precision == FP8:  # the suite's conversion: torchao's, with only layers it can run
            model = make_policy(FP8, "cpu").convert_module(model)
        x = torch.empty(m, k, dtype=torch.bfloat16, requires_grad=True)
        with profiler:
            out = model(x)
        seed = torch.empty_like(out)
        profiler.phase = "backward"
        with profiler:
            out.backward(seed)
    return profiler.profile()
