"""A step's op calls as costs (amp_suite.instruments.diagnostics.op_costs): eager, each op its own
kernel; compiled, fused as torch.compile fuses them; and a float8 matmul as it runs, from a real
torchao profile."""

from __future__ import annotations

import pytest

from amp_suite.instruments.diagnostics.op_costs import OpCall, TensorUse, compiled_costs, eager_costs

MB = 1 << 20


def call(op, reads, writes, phase="forward", flops=0, reduces=False, arguments="", dtype="bfloat16"):
    """An op reading and writing (value, bytes) pairs."""
    uses = lambda pairs: tuple(TensorUse(value, size) for value, size in pairs)  # noqa: E731
    return OpCall(phase, op, dtype, flops, uses(reads), uses(writes), 1, reduces, arguments)


def by_op(costs):
    return {(c.phase, c.op): c for c in costs}


def test_a_pointwise_chain_between_two_matmuls_is_one_kernel_that_reads_its_input_once_and_writes_its_output_once():
    calls = [
        call("mm", [(0, MB), (1, MB)], [(2, MB)], flops=10**9),
        call("mul", [(2, MB)], [(3, MB)]),
        call("add", [(3, MB), (2, MB)], [(4, MB)]),
        call("relu", [(4, MB)], [(5, MB)]),
        call("mm", [(5, MB), (1, MB)], [(6, MB)], flops=10**9),
    ]
    eager = by_op(eager_costs(calls))
    assert sum(c.kernels for c in eager.values()) == 5 and eager["forward", "add"].bytes == 3 * MB
    compiled = by_op(compiled_costs(calls))
    fused = compiled["forward", "fused mul+add+relu"]
    assert (fused.kernels, fused.bytes) == (1, 2 * MB)  # reads the first matmul's result, writes the second's input
    assert compiled["forward", "mm"].calls == 2 and compiled["forward", "mm"].bytes == eager["forward", "mm"].bytes
    assert sum(c.kernels for c in compiled.values()) == 3


def test_a_dynamically_scaled_float8_cast_is_two_kernels_reading_its_input_twice():
    """amax (a reduction: its result is whole only when its kernel ends), then the scaled cast."""
    x, amax, scale, scaled, fp8 = 0, 1, 2, 3, 4
    calls = [
        call("abs", [(x, 2 * MB)], [(9, 2 * MB)]),
        call("max", [(9, 2 * MB)], [(amax, 4)], reduces=True),
        call("reciprocal", [(amax, 4)], [(scale, 4)], dtype="float32"),
        call("mul", [(x, 2 * MB), (scale, 4)], [(scaled, 4 * MB)], dtype="float32"),
        call("_to_copy", [(scaled, 4 * MB)], [(fp8, MB)], dtype="float8_e4m3fn"),
        call("mm", [(fp8, MB), (5, MB)], [(6, 2 * MB)], flops=10**9),
    ]
    compiled = by_op(compiled_costs(calls))
    assert compiled["forward", "fused abs+max"].bytes == 2 * MB + 4
    cast = compiled["forward", "fused reciprocal+mul+_to_copy"]
    # x again, the amax, and the float8 result: the fp32 product stays in registers
    assert cast.bytes == 2 * MB + 4 + MB
    assert sum(c.kernels for c in compiled.values()) == 3


def test_a_backward_that_repeats_a_forward_cast_reads_the_forwards_result_and_a_different_op_is_not_merged():
    forward = [
        call("abs", [(0, MB)], [(1, MB)]),
        call("max", [(1, MB)], [(2, 4)], reduces=True),
        call("mm", [(0, MB), (5, MB)], [(6, MB)], flops=10**9),
    ]
    again = [
        call("abs", [(0, MB)], [(11, MB)], phase="backward"),
        call("max", [(11, MB)], [(12, 4)], phase="backward", reduces=True),
        call("mul", [(6, MB), (12, 4)], [(13, MB)], phase="backward"),
        call("mm", [(13, MB), (5, MB)], [(14, MB)], phase="backward", flops=10**9),
    ]
    compiled = by_op(compiled_costs(forward + again))
    assert ("backward", "fused abs+max") not in compiled and compiled["forward", "fused abs+max"].calls == 1
    assert compiled["backward", "mul"].bytes == MB + 4 + MB  # reads the forward's amax, saved for it
    other = [call("abs", [(0, MB)], [(11, MB)], phase="backward", arguments="[2]"), *again[1:]]
    assert ("backward", "fused abs+max") in by_op(compiled_costs(forward + other))  # other arguments: computed again
    assert sum(c.kernels for c in eager_costs(forward + again)) == 7  # eager computes everything it is asked to


def test_a_float8_matmul_runs_in_float8_and_reads_one_byte_an_element():
    """torchao's Float8Linear under the profiler: the matmul it dispatches is an `mm` on tensor
    subclasses that show bfloat16; the profile counts what they hold."""
    pytest.importorskip("torchao")
    from amp_suite.cell.float8_benchmark import BF16, FP8, profile_benchmark

    m, k, n = 64, 128, 32
    costs = {mode: by_op(profile_benchmark(m, k, n, mode).costs(compiled=True)) for mode in (BF16, FP8)}
    bf16, fp8 = costs[BF16]["forward", "mm"], costs[FP8]["forward", "mm"]
    assert (bf16.dtype, fp8.dtype) == ("bfloat16", "float8_e4m3fn") and bf16.flops == fp8.flops == 2 * m * k * n
    assert bf16.bytes == (m * k + k * n + m * n) * 2
    assert fp8.bytes == m * k + k * n + m * n * 2 + 2 * 4  # float8 operands, a bf16 result, two fp32 scales
    backward = [c for (phase, _), c in costs[FP8].items() if phase == "backward" and c.flops]
    assert {c.dtype for c in backward} == {"float8_e5m2"} and sum(c.calls for c in backward) == 2
    # the backward's casts of the input and weight are the forward's, computed once; the gradient's is its own
    amaxes = {phase: sum(c.calls for (p, op), c in costs[FP8].items() if p == phase and op.endswith("abs+max"))
              for phase in ("forward", "backward")}  # fmt: skip
    assert amaxes == {"forward": 2, "backward": 1}, amaxes
