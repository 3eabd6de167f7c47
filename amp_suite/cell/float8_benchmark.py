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

`measure_benchmark` runs it as a matrix cell (workload torchao-float8-linear) and times it the same
way: each iteration traced with torch.profiler, its time the sum of its device work's durations.
Its iteration is arranged so that the device runs nothing but the model's forward and backward:
the backward starts from a gradient made once (no `sum`, fill or copy), and every gradient is
cleared first, so autograd hands each new one over instead of adding it in. So no kernel needs
filtering by name. On a CPU the profiler sees the ops' CPU times, which the record says.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from amp_suite.cell.compilation import compiled
from amp_suite.cell.precision import make_policy
from amp_suite.config import CellSpec
from amp_suite.config.workloads import Float8LinearBenchmarkConfig
from amp_suite.hardware.backends import backend_of
from amp_suite.instruments import TimedRegion
from amp_suite.instruments.diagnostics.op_costs import StepProfile
from amp_suite.instruments.diagnostics.op_profile import OpProfiler
from amp_suite.instruments.memory import PeakMemory
from amp_suite.instruments.timers import Span, Spread, step_stats

BENCHMARK = "torchao-float8-linear"  # the workload, and the `workload` of its references' configs
BF16, FP8 = "bf16", "fp8-tensorwise"  # the two sides of a published speedup, as the suite names them
PRECISIONS = Float8LinearBenchmarkConfig.precisions
Progress = Callable[[str, int, int], None]


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
    """The benchmark's step at forward shapes M x K @ K x N, in bf16 or an fp8 mode, on fake tensors."""
    if precision not in PRECISIONS:
        raise ValueError(f"torchao's benchmark runs {', '.join(PRECISIONS)}, not {precision!r}")
    profiler = OpProfiler()
    with FakeTensorMode():
        model = LNLinearSigmoid(k, n)
        if precision != BF16:  # the suite's conversion: torchao's, with only layers it can run
            model = make_policy(precision, "cpu").convert_module(model)
        x = torch.empty(m, k, dtype=torch.bfloat16, requires_grad=True)
        with profiler:
            out = model(x)
        seed = torch.empty_like(out)
        profiler.phase = "backward"
        with profiler:
            out.backward(seed)
    return profiler.profile()


def measure_benchmark(spec: CellSpec, device: torch.device, progress: Progress) -> dict[str, Any]:
    """The benchmark as a cell: `warmup_steps` iterations (the first compiles), then `steps`
    iterations each traced on its own; the record's fields. Its rate is rows of the input per
    second of kernel time, each iteration a window."""
    rows, in_features, out_features = spec.batch_size, spec.workload.in_features, spec.workload.out_features
    torch.manual_seed(spec.seed)
    model, policy = LNLinearSigmoid(in_features, out_features).to(device), make_policy(spec.precision, device.type)
    if policy.swaps_layers:  # Float8Linear in place of the Linear; bf16 runs the model as it is, as published
        model = policy.convert_module(model)
    step = compiled(model, spec.compile)
    x = torch.randn(rows, in_features, dtype=torch.bfloat16, device=device, requires_grad=True)
    grad_out = torch.ones(rows, out_features, dtype=torch.bfloat16, device=device)  # what `sum` seeds a backward with

    def iteration() -> None:
        x.grad = None
        model.zero_grad(set_to_none=True)
        step(x).backward(grad_out)

    started = time.perf_counter()
    for done in range(spec.warmup_steps):
        iteration()
        progress("warmup", done + 1, spec.warmup_steps)
    live = backend_of(device)
    live.synchronize()
    warmup_s = time.perf_counter() - started
    times_ms = []
    with PeakMemory(live) as memory:
        for done in range(spec.steps):
            # Its device work's durations summed (torchao's measure), or on a CPU its ops' own CPU times.
            times_ms.append(live.device_time_ms(iteration))
            progress("measure", done + 1, spec.steps)
    spread = Spread.of([Span(i, i + 1, ms / 1e3) for i, ms in enumerate(times_ms)], list(range(spec.steps + 1)), rows)
    stats = step_stats(times_ms)
    flops = 3 * 2 * rows * in_features * out_features  # the three matmuls: forward, input's and weight's gradients
    return {
        "throughput": spread.samples / spread.seconds, "throughput_windows": spread.windows,
        "step_time_ms": spread.seconds * 1e3 * rows / spread.samples,
        "settled_after_steps": spec.warmup_steps + spread.warming,
        "throughput_spread": spread.spread, "noisy": spread.noisy,
        "windows_set_aside": [vars(s) for s in spread.set_aside],
        "kernel_ms_per_step": stats.mean_ms, "step_time_ms_p50": stats.p50_ms, "step_time_ms_p90": stats.p90_ms,
        "step_time_ms_mean": stats.mean_ms, "step_time_ms_stdev": stats.stdev_ms, "warmup_s": warmup_s,
        "flops_per_step": flops, "tflops": flops / (stats.mean_ms / 1e3) / 1e12,
        "data_source": "synthetic", "train_samples": rows, "nonfinite_step": None,
        **memory.fields(TimedRegion(spec.steps, rows)), **policy.telemetry(),
    }  # fmt: skip

