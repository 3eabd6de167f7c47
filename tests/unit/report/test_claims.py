"""judge_claims (amp_suite.report.claims), one test per claim of the article: each verdict it can
give, from records built to give it, through build_report as a report is made. A claim's cases
differ in one figure or one fact, so its test passes only while the claim reads that one.

FIXTURES: every GPU record here is made up to exercise the logic (its host is named
"fixture-..."), not a measurement; none of it ships as a result.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.fixture_records import A100, CPU, MLP, V100, records, rn50, three

from amp_suite.records.results import CellRecord
from amp_suite.report import build_report
from amp_suite.report.claims import CLAIMS

P100 = V100.model_copy(
    update={"device_name": "Tesla P100-PCIE-16GB", "compute_capability": "6.0", "host": "fixture-p100",
            "tensor_cores": False, "fast_fp16": False}
)  # fmt: skip
H100 = A100.model_copy(
    update={"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "host": "fixture-h100"}
)
DDP_MLP = {**MLP, "ddp": {"world_size": [2]}}  # plain (float32) all-reduce

Case = Callable[[], list[CellRecord]]


def verdict_of(made: list[CellRecord], claim_id: str) -> str:
    """The claim's one verdict on the one machine these records ran on."""
    (found,) = [c for c in build_report(made, []).claims if c.claim == claim_id]
    return found.verdict


def runs(machine, workload, idle: float | None = None, **throughputs: float) -> list[CellRecord]:
    """Three seeds of each precision at these throughputs (samples/s), all of the same accuracy; on a
    GPU, the GPU idle `idle` of each step (default: GPU-bound)."""
    shares = {} if idle is None else {"idle": idle}
    return records(machine, workload, {precision: three(value) for precision, value in throughputs.items()}, **shares)


def accuracy(bf16: float, seeds: int = 3) -> list[CellRecord]:
    """fp32 at 0.9 beside bf16 at this validation accuracy, `seeds` seeds each."""
    results = {"fp32": three(1000.0, 0.9), "bf16": three(1000.0, bf16)}
    return records(A100, MLP, {precision: found[:seeds] for precision, found in results.items()})


def memory(machine, bf16_mb: float) -> list[CellRecord]:
    """fp32 peaking at 1000 MB beside bf16 peaking at `bf16_mb`."""
    return records(machine, MLP, {"fp32": three(1.0), "bf16": three(1.0)}, memory={"bf16": bf16_mb})


def fp16_pair(noscale_accuracy: float, underflow: float) -> list[CellRecord]:
    results = {"fp32": three(1000.0), "fp16": three(1000.0), "fp16-noscale": three(1000.0, noscale_accuracy)}
    return records(V100, MLP, results, underflow=underflow)


def audited(softmax: str = "float32") -> list[CellRecord]:
    """bf16 records with a dtype audit (instruments.diagnostics.dtype_audit's shape) of their step."""
    audit = {
        "precision": "bf16", "compute_dtype": "bfloat16", "loss_dtype": "float32",
        "checks": {"loss_float32": True, "matmul_conv_in_compute_dtype": True},
        "ops": [
            {"phase": "forward", "op": "addmm", "calls": 3, "input_dtypes": ["bfloat16"],
             "output_dtypes": ["bfloat16"], "ran_in": "bfloat16"},
            {"phase": "forward", "op": "_log_softmax", "calls": 1, "input_dtypes": ["bfloat16"],
             "output_dtypes": [softmax], "ran_in": softmax},
        ],
    }  # fmt: skip
    return [r.updated(dtype_audit=audit) if r.precision == "bf16" else r for r in runs(A100, MLP, fp32=1e3, bf16=1.1e3)]


def ddp(machine, share: float, noisy: bool = False) -> list[CellRecord]:
    """DDP records at world size 2 whose step spends `share` of its time communicating."""
    made = records(machine, DDP_MLP, {"fp32": three(1000.0), "bf16": three(1500.0)})
    return [r.updated(comm_share=share, comm_share_raw=share, noisy=noisy) for r in made]


def fp8_sweep(fp8_vs_bf16: dict[int, float], machine=H100) -> list[CellRecord]:
    """fp8-tensorwise beside bf16 at each hidden size, the FLOPs growing with the size (what orders them)."""
    made = []
    for hidden, ratio in fp8_vs_bf16.items():
        mlp = {**MLP, "hidden": hidden, "label": f"linear-{hidden}"}
        for record in records(machine, mlp, {"bf16": three(1000.0), "fp8-tensorwise": three(1000.0 * ratio)}):
            made.append(record.updated(tflops=hidden / 1000, flops_per_step=hidden * 10**9))
    return made


RN50 = rn50(True)
HOST_BOUND = 0.8  # the GPU idled 80% of the step: the host's launches set the pace
# claim -> verdict -> records that must give it. Within a claim the cases differ in one figure or
# one fact where that is all it takes to flip the verdict.
CASES: dict[str, dict[str, Case]] = {
    "tensor_core_speedup": {  # against TF32 on the A100
        "supported": lambda: runs(A100, RN50, fp32=300.0, tf32=400.0, bf16=800.0),
        "contradicted": lambda: runs(A100, RN50, fp32=300.0, tf32=400.0, bf16=1600.0),  # 4x: beyond 3x
        "not measured here": lambda: runs(CPU, RN50, fp32=300.0, bf16=800.0),  # no tensor cores
    },
    "launch_bound_little_gain": {
        "supported": lambda: runs(A100, MLP, HOST_BOUND, fp32=100_000.0, fp16=110_000.0),
        "contradicted": lambda: runs(A100, MLP, HOST_BOUND, fp32=100_000.0, fp16=150_000.0),
        "not measured here": lambda: runs(A100, MLP, fp32=100_000.0, fp16=110_000.0),  # the GPU's pace
    },
    "bf16_keeps_parity": {
        "supported": lambda: accuracy(bf16=0.899),
        "contradicted": lambda: accuracy(bf16=0.7),
        "not measured here": lambda: accuracy(bf16=0.7, seeds=1),  # one seed: indicative only
    },
    "fp16_needs_scaler": {  # 80% of the gradients below fp16's floor
        "supported": lambda: fp16_pair(noscale_accuracy=0.1, underflow=0.8),
        "contradicted": lambda: fp16_pair(noscale_accuracy=0.9, underflow=0.8),
        "not measured here": lambda: fp16_pair(noscale_accuracy=0.1, underflow=0.0),  # no small gradients to lose
    },
    "amp_lowers_memory": {
        "supported": lambda: memory(A100, bf16_mb=600.0),
        "contradicted": lambda: memory(A100, bf16_mb=1100.0),
        "not measured here": lambda: memory(CPU, bf16_mb=600.0),  # a resident set, not an allocator's peak
    },
    "capability_rule": {  # the A100's rule: bf16
        "supported": lambda: runs(A100, RN50, fp32=400.0, fp16=1000.0, bf16=990.0),  # within 5% of fp16
        "contradicted": lambda: runs(A100, RN50, fp32=400.0, fp16=1000.0, bf16=600.0),
        "not measured here": lambda: runs(A100, MLP, fp32=100_000.0, fp16=100_000.0, bf16=99_000.0),
    },
    "loss_softmax_float32": {
        "supported": audited,
        "contradicted": lambda: audited(softmax="bfloat16"),
        "not measured here": lambda: runs(A100, MLP, fp32=1000.0, bf16=1100.0),  # no audit
    },
    "pre_volta_little_gain": {
        "supported": lambda: runs(P100, MLP, fp32=1000.0, fp16=1100.0),
        "contradicted": lambda: runs(P100, MLP, fp32=1000.0, fp16=1500.0),
        "not measured here": lambda: runs(V100, MLP, fp32=1000.0, fp16=1100.0),  # it has tensor cores
    },
    "ddp_communication_bound": {
        "supported": lambda: ddp(A100, share=0.6),
        "contradicted": lambda: ddp(A100, share=0.2),
        "not measured here": lambda: ddp(A100, share=0.6, noisy=True),  # a share read off noisy steps
    },
    "fp8_small_matmuls_slower": {
        "supported": lambda: fp8_sweep({1024: 0.7, 4096: 1.1, 8192: 1.3}),
        "contradicted": lambda: fp8_sweep({1024: 1.05, 4096: 1.1, 8192: 1.3}),  # it pays at the smallest size
        "not measured here": lambda: fp8_sweep({8192: 1.3}),  # one size: no crossover to see
    },
}


@pytest.mark.parametrize("claim_id", list(CASES))
def test_each_claim_gives_each_verdict_from_the_records_that_call_for_it(claim_id):
    found = {expected: verdict_of(case(), claim_id) for expected, case in CASES[claim_id].items()}
    assert found == {expected: expected for expected in CASES[claim_id]}


def test_a_host_bound_step_is_no_evidence_for_the_tensor_core_claim_whatever_its_speedup():
    """The supported case's figures and the contradicted case's, but host-bound: a slow host's speed,
    not the tensor cores'. The reason names the bound and its figures (no step-time threshold)."""
    for bf16 in (800.0, 1600.0):
        made = runs(A100, RN50, HOST_BOUND, fp32=300.0, tf32=400.0, bf16=bf16)
        (found,) = [c for c in build_report(made, []).claims if c.claim == "tensor_core_speedup"]
        assert found.verdict == "not measured here", found
        assert "bf16 host-bound (GPU busy" in found.evidence and "80% idle" in found.evidence, found.evidence


def test_every_claim_the_report_judges_has_its_cases_here():
    assert CASES.keys() == CLAIMS.keys()
    assert all(len(cases) == 3 for cases in CASES.values())  # supported, contradicted, not measured here


def test_a_gpu_only_claim_is_not_measured_on_a_cpu_whatever_the_figures():
    """Where a claim is about a GPU effect, the CPU's records are no evidence: the same figures that
    support it on an A100 leave it not measured on a CPU, and the evidence says why."""
    (found,) = [c for c in build_report(ddp(CPU, share=0.6), []).claims if c.claim == "ddp_communication_bound"]
    assert found.verdict == "not measured here" and "gloo" in found.evidence
    assert verdict_of(fp8_sweep({1024: 0.7, 8192: 1.3}, machine=CPU), "fp8_small_matmuls_slower") == "not measured here"


def test_the_fp8_sweep_names_its_crossover_smallest_size_first():
    """torchao's small-matmul claim holds where fp8 is slower than bf16 at the small sizes and pays
    at the large ones, with one crossover; two crossovers contradict it."""
    report = build_report(fp8_sweep({1024: 0.7, 2048: 0.9, 4096: 1.1, 8192: 1.3}), [])
    (crossover,) = [c for c in report.claims if c.claim == "fp8_small_matmuls_slower"]
    assert crossover.verdict == "supported", crossover.evidence
    assert crossover.evidence.index("linear-1024") < crossover.evidence.index("linear-8192")
    assert "0.70x" in crossover.evidence
    slower_at_every_size = fp8_sweep({1024: 0.8, 8192: 0.9})
    assert verdict_of(slower_at_every_size, "fp8_small_matmuls_slower") == "supported"
    two_crossovers = fp8_sweep({1024: 0.7, 2048: 1.2, 4096: 0.8})
    assert verdict_of(two_crossovers, "fp8_small_matmuls_slower") == "contradicted"
