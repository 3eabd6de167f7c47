"""A GPU step's bound (analysis.bound): from the GPU's traced work where a record has it, else
inferred from MFU on matmul-heavy steps, never from the step's length."""

from __future__ import annotations

from amp_suite.analysis.bound import GPU_BOUND, HOST_BOUND, MIXED, host_bound_words, step_bound


def test_the_idle_share_decides_where_the_gpu_was_traced():
    assert step_bound(20.0, 2.0, 0.9).bound == HOST_BOUND
    assert step_bound(20.0, 19.0, 0.05).bound == GPU_BOUND
    assert step_bound(20.0, 13.0, 0.35).bound == MIXED
    # The step's length says nothing: a 200 ms step whose GPU idled 90% is the host's.
    assert step_bound(200.0, 20.0, 0.9).bound == HOST_BOUND
    assert step_bound(0.5, 0.49, 0.02).bound == GPU_BOUND


def test_without_a_trace_mfu_decides_on_matmul_heavy_steps_said_as_inferred():
    lease = step_bound(22.6, None, None, mfu=0.028, matmul_share=0.998, power_w=236.0)  # the H200 lease's bf16
    assert lease.bound == HOST_BOUND and not lease.measured
    assert lease.words() == "host-bound (2.8% MFU at 236 W in a 22.6 ms step, inferred from MFU)"
    assert step_bound(18.7, None, None, mfu=0.48, matmul_share=0.998).bound == GPU_BOUND
    assert step_bound(18.7, None, None, mfu=0.2, matmul_share=0.998) is None  # between the marks
    assert step_bound(18.7, None, None, mfu=0.02, matmul_share=0.5) is None  # not matmuls: bandwidth, maybe
    assert step_bound(None, 1.0, 0.5) is None and step_bound(5.0, None, None) is None


def test_the_answers_clause_names_the_host_bound_modes_and_every_modes_figures():
    words = host_bound_words([("fp32", step_bound(18.0, 17.0, 0.06)), ("bf16", step_bound(22.0, 7.0, 0.68))])
    assert words.startswith("bf16 host-bound: kernel launches, not the GPU, set the pace (")
    assert "fp32 gpu-bound (GPU busy 17 ms of a 18 ms step (6% idle))" in words
    assert "bf16 host-bound (GPU busy 7 ms of a 22 ms step (68% idle))" in words
    assert "CUDA graphs" in words
