"""The autocast article's claims, and torchao's about fp8, judged per machine from its records. No torch here.

Each claim gets, per machine, `supported`, `contradicted` or `not measured here`, and the
numbers behind the verdict. Every threshold lives in THRESHOLDS (docs/reports.md quotes them). A
parity-based claim counts only pass/fail verdicts: an "indicative" one (a single fp32 seed, no
noise floor) decides nothing, so a one-seed matrix leaves those claims not measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from pydantic import BaseModel

from amp_suite.analysis.answer import NO_ANSWER, Answer
from amp_suite.analysis.bound import GPU_BOUND
from amp_suite.analysis.quantities import FAIL, INDICATIVE, PASS
from amp_suite.analysis.summary import SummaryRow
from amp_suite.analysis.words import PARITY_WORDS, reach_words, times, verdict_word, verdict_words
from amp_suite.config.base import OK, SKIPPED
from amp_suite.config.precisions import (
    AMP_MODES,
    BF16_BASELINE,
    CONTROLS,
    FP8_MODES,
    REFERENCE,
    TF32_BASELINE,
    UNSCALED_AMP_MODES,
    scaled_counterpart,
)
from amp_suite.hardware.backends import backend_recorded
from amp_suite.hardware.capability import recommend
from amp_suite.records.machine import Machine
from amp_suite.records.results import CellRecord

# The article the product grew from: every claim below quotes it, and every surface names it so.
ARTICLE = "Mixed Precision in PyTorch: What autocast Changes and When It Pays Off"

@dataclass(frozen=True)
class Thresholds:
    tensor_core_low: float = 1.5  # "on the order of 1.5-3x" ...
    tensor_core_high: float = 3.0  # ... against TF32 where the GPU has it (as published), else fp32
    little_gain: float = 1.2  # "little gain": the best AMP mode is at most this much faster than fp32
    memory_ratio: float = 1.0  # "lowers peak memory": the median AMP/fp32 peak-memory ratio is below this
    underflow_fraction: float = 0.01  # a workload "has small gradients" when this share is below fp16's floor
    comm_bound_share: float = 0.5  # DDP: communication "is the bottleneck" when it takes at least this share of a step


THRESHOLDS = Thresholds()
RULE_MODES = (REFERENCE, *AMP_MODES)  # what the capability rule chooses between
AMP_NAMES = "/".join(AMP_MODES)  # for the reasons a claim is not measured
SOFTMAX_OPS = ("_softmax", "softmax", "_log_softmax", "log_softmax")
ATTENTION_OPS = "_scaled_dot_product"  # fused attention: its softmax runs inside, out of the audit's sight
ClaimVerdict = Literal["supported", "contradicted", "not measured here"]
SUPPORTED: ClaimVerdict = "supported"
CONTRADICTED: ClaimVerdict = "contradicted"
NOT_MEASURED: ClaimVerdict = "not measured here"  # no record here can support or contradict the claim


class ClaimResult(BaseModel):
    claim: str  # the claim's id
    text: str  # the claim, in the project's words
    machine: str  # the machine id
    verdict: ClaimVerdict
    evidence: str  # the numbers behind the verdict


@dataclass(frozen=True)
class Evidence:
    """What a claim sees of one machine."""

    machine: Machine
    rows: list[SummaryRow]
    records: list[CellRecord]
    matmul_heavy: frozenset[str]  # the setups whose workload declares itself matmul-heavy (config.workloads)
    answers: list[Answer]  # this machine's (analysis.conclusion), which the capability rule is judged by
    matmul_heavy_workloads: tuple[str, ...] = ()  # those workloads' names, for the reasons

    @property
    def on_host(self) -> bool:
        """The machine's device is the host's own cores (a CPU): no GPU effect can be measured on it."""
        return backend_recorded(self.machine.device_type).is_host

    def ok(self, precisions: Sequence[str]) -> list[SummaryRow]:
        return [row for row in self.rows if row.precision in precisions and row.runs]

    def reference(self, setup: str) -> SummaryRow | None:
        return next((r for r in self.rows if r.setup == setup and r.precision == REFERENCE), None)

    def compute_bound(self, row: SummaryRow) -> bool:
        """A matmul-heavy kind whose step was the GPU's, in this mode and in fp32 (analysis.bound:
        measured from the GPU's traced work, else inferred from MFU; never from a step time, which a
        slow host makes long)."""
        reference = self.reference(row.setup)
        return row.setup in self.matmul_heavy and _gpu_bound(row) and reference is not None and _gpu_bound(reference)

    def launch_bound(self, row: SummaryRow) -> bool:
        """The mode's step was set by the host's kernel launches, not by the GPU's work."""
        return row.bound is not None and row.bound.host_bound

    def host_bound_words(self, rows: Sequence[SummaryRow]) -> str:
        """The host-bound rows among these, with their figures, as a clause ("" where none is)."""
        host = [f"{r.where} {r.precision} {r.bound.words()}" for r in rows if self.launch_bound(r)]
        return f"; host-bound, so not the GPU's speed: {'; '.join(host)}" if host else ""


def _gpu_bound(row: SummaryRow) -> bool:
    return row.bound is not None and row.bound.bound == GPU_BOUND


Verdict = tuple[ClaimVerdict, str]
Check = Callable[[Evidence, Thresholds], Verdict]


def _best(rows: list[SummaryRow], baseline: str) -> dict[str, tuple[SummaryRow, float]]:
    """Per setup, the row with the highest speedup over the baseline, and that speedup."""
    best: dict[str, tuple[SummaryRow, float]] = {}
    for row in rows:
        over = row.speedups.get(baseline)
        if over is not None and (row.setup not in best or over.value > best[row.setup][1]):
            best[row.setup] = (row, over.value)
    return best


def _listing(best: dict[str, tuple[SummaryRow, float]]) -> str:
    return "; ".join(f"{row.where} {row.precision} {value:.2f}x" for row, value in best.values())


def tensor_core_speedup(e: Evidence, t: Thresholds) -> Verdict:
    if not e.machine.tensor_cores:
        return NOT_MEASURED, "this device has no tensor cores"
    baseline = TF32_BASELINE if e.machine.tf32 else REFERENCE  # what published figures divide by on this GPU
    rows = [r for r in e.ok(AMP_MODES) if e.compute_bound(r)]
    best = _best(rows, baseline)
    if not best:
        kinds = ", ".join(e.matmul_heavy_workloads) or "none in these records"
        heavy = [r for r in e.ok(AMP_MODES) if r.setup in e.matmul_heavy]
        return NOT_MEASURED, (
            f"no {AMP_NAMES} run with {baseline} of a matmul-heavy workload ({kinds}) whose steps, in both"
            f" modes, were the GPU's own work (measured, or inferred from MFU){e.host_bound_words(heavy)}"
        )
    outside = [value for _, value in best.values() if not t.tensor_core_low <= value <= t.tensor_core_high]
    verdict = CONTRADICTED if outside else SUPPORTED
    claim = f"{t.tensor_core_low}-{t.tensor_core_high}x"
    return verdict, f"best AMP speedup over {baseline}: {_listing(best)} (claim: {claim})"


def launch_bound_little_gain(e: Evidence, t: Thresholds) -> Verdict:
    if e.on_host:
        return NOT_MEASURED, "kernel-launch overhead is a GPU effect; this is a CPU"
    best = _best([r for r in e.ok(AMP_MODES) if e.launch_bound(r)], REFERENCE)
    if not best:
        why = f"no {AMP_NAMES} run with {REFERENCE} whose step was host-bound (kernel launches, not the GPU, set it)"
        return NOT_MEASURED, why
    high = [value for _, value in best.values() if value > t.little_gain]
    verdict = CONTRADICTED if high else SUPPORTED
    where = "where the AMP step is host-bound"
    return verdict, f"best AMP speedup over {REFERENCE} {where}: {_listing(best)} (claim: <= {t.little_gain}x)"


def bf16_keeps_parity(e: Evidence, t: Thresholds) -> Verdict:
    """The AMP modes without a loss scaler (bf16: fp32's range) keep parity."""
    names = "/".join(UNSCALED_AMP_MODES)
    rows = [r for r in e.rows if r.precision in UNSCALED_AMP_MODES and r.status != SKIPPED]
    # A failed test whose mean is within the margin shows too few seeds, not a loss: it decides nothing.
    judged = [r for r in rows if r.parity and (r.parity.verdict == PASS or r.parity.lost)]
    if not judged:
        one_seed = PARITY_WORDS[INDICATIVE]
        why = f"{names} runs have only {one_seed} verdicts (one seed): run repeats >= 2" if rows else f"no {names} run"
        if any(r.parity and r.parity.verdict == FAIL for r in rows):
            why = f"{names} runs were not shown within the margin, nor beyond it: run more seeds"
        return NOT_MEASURED, why
    failed = [r for r in judged if r.parity.verdict == FAIL]
    listing = "; ".join(f"{r.where} {r.precision} {verdict_words(r.parity)}" for r in judged)
    return (CONTRADICTED if failed else SUPPORTED), f"without a loss scaler: {listing}"



def fp16_needs_scaler(e: Evidence, t: Thresholds) -> Verdict:
    """A control without loss scaling fails parity where its scaled counterpart passes."""
    pairs = {(r.setup, r.precision): r for r in e.rows if r.parity}
    fp32 = {r.setup: r for r in e.rows if r.precision == REFERENCE}
    findings, verdicts = [], set()
    for (setup, precision), row in pairs.items():
        scaled = scaled_counterpart(precision) if precision in CONTROLS else None
        if scaled is None:
            continue
        underflow = fp32[setup].grad_underflow_fraction if setup in fp32 else None
        with_scaler = pairs[setup, scaled].parity.verdict if (setup, scaled) in pairs else None
        judged = {row.parity.verdict, with_scaler} <= {PASS, FAIL}
        if not judged or underflow is None or underflow < t.underflow_fraction:
            continue  # no noise floor, no run with GradScaler to compare, or no small gradients to lose
        verdicts.add(SUPPORTED if (row.parity.verdict, with_scaler) == (FAIL, PASS) else CONTRADICTED)
        reach = row.time_to_target  # learning that stalls never gets to the target
        findings.append(
            f"{row.where}: {underflow:.0%} of gradients below fp16's floor;"
            f" without a scaler parity {verdict_word(row.parity)}, with GradScaler {PARITY_WORDS[with_scaler]}"
            + (f"; {reach_words(reach, precision)}" if reach is not None else "")
        )
    if not findings:
        return NOT_MEASURED, (
            f"no {'/'.join(CONTROLS)} and scaled pair judged on a workload with >= {t.underflow_fraction:.0%}"
            " of gradients below fp16's floor (see experiments/failure-modes.yaml)"
        )
    return (CONTRADICTED if CONTRADICTED in verdicts else SUPPORTED), "; ".join(findings)


def amp_lowers_memory(e: Evidence, t: Thresholds) -> Verdict:
    if e.on_host:
        return NOT_MEASURED, "a CPU's peak resident memory is not the allocator peak the claim is about"
    ratios = [r for r in e.ok(AMP_MODES) if r.memory_ratio is not None]
    if not ratios:
        return NOT_MEASURED, f"no {AMP_NAMES} run with a {REFERENCE} baseline"
    median = statistics.median(r.memory_ratio.value for r in ratios)
    listing = "; ".join(f"{r.where} {r.precision} {r.memory_ratio.value:.2f}" for r in ratios)
    verdict = SUPPORTED if median < t.memory_ratio else CONTRADICTED
    return verdict, f"median AMP/{REFERENCE} peak memory {median:.2f} (claim: < {t.memory_ratio}): {listing}"


def capability_rule(e: Evidence, t: Thresholds) -> Verdict:
    """The rule as the answer (analysis.answer) judges it, once per comparison, among the modes the
    rule chooses from: the claim holds where the measurement picks the rule's mode, and fails where it
    picks another; where the measurement is inconclusive, the comparison is no evidence either way."""
    caps = e.machine.caps
    if caps is None:
        return NOT_MEASURED, "the records do not say what this device does fast"
    advice = recommend(caps)
    findings, contradicted, unclear = [], False, 0
    for answer in e.answers:
        rows = [r for r in e.rows if r.setup == answer.setup and r.precision in RULE_MODES and r.runs]
        if not rows or not all(e.compute_bound(r) for r in rows) or answer.verdict == NO_ANSWER:
            continue  # the article expects little from AMP on launch-bound models: not the rule's ground
        if answer.rule_holds is None:
            unclear += 1
            continue
        contradicted |= not answer.rule_holds
        found = answer.rule_disagrees or f"the measurement picks {advice.precision} too"
        findings.append(f"{rows[0].where}: {found}")
    if not findings:
        inconclusive = f" ({unclear} inconclusive)" if unclear else ""
        return NOT_MEASURED, (
            f"the rule recommends {advice.precision} here; no compute-bound workload has a conclusive answer"
            f"{inconclusive}"
        )
    return (CONTRADICTED if contradicted else SUPPORTED), f"{advice.reason}. " + "; ".join(findings)


def loss_softmax_float32(e: Evidence, t: Thresholds) -> Verdict:
    audits = [r for r in e.records if r.precision in AMP_MODES and r.status == OK and r.dtype_audit]
    if not audits:
        return NOT_MEASURED, f"no dtype audit of an {AMP_NAMES} run"
    lapses, seen, fused = [], set(), set()
    for record in audits:
        audit = record.dtype_audit
        if not audit.get("checks", {}).get("loss_float32", False):
            lapses.append(f"{record.cell_id}: the loss was not float32")
        for op in audit.get("ops", []):
            name = op.get("op", "")
            if op.get("phase") != "forward":
                continue
            fused |= {name} if name.startswith(ATTENTION_OPS) else set()
            if name in SOFTMAX_OPS:
                seen.add(name)
                if op.get("output_dtypes") != ["float32"]:
                    lapses.append(f"{record.cell_id}: {name} gave {', '.join(op['output_dtypes'])}")
    if lapses:
        return CONTRADICTED, "; ".join(dict.fromkeys(lapses))
    unseen = f"; softmax inside fused attention ({', '.join(sorted(fused))}) is out of the audit's sight"
    unseen = unseen if fused else ""
    return SUPPORTED, (
        f"{len(audits)} audited {AMP_NAMES} step(s): the loss and every softmax op seen"
        f" ({', '.join(sorted(seen)) or 'none'}) in float32{unseen}"
    )


def pre_volta_little_gain(e: Evidence, t: Thresholds) -> Verdict:
    if e.on_host or e.machine.tensor_cores is not False:
        return NOT_MEASURED, "this device is not a GPU older than Volta (compute capability 7.0)"
    best = _best(e.ok(AMP_MODES), REFERENCE)
    if not best:
        why = f"no {AMP_NAMES} run with {REFERENCE} (pass --force: they are skipped on pre-Volta GPUs)"
        return NOT_MEASURED, why
    high = [value for _, value in best.values() if value > t.little_gain]
    return (CONTRADICTED if high else SUPPORTED), f"best AMP speedup over {REFERENCE}: {_listing(best)}"


def ddp_communication_bound(e: Evidence, t: Thresholds) -> Verdict:
    """At the largest world size measured, with plain (float32) all-reduce under fp16/bf16 autocast:
    does communication take at least comm_bound_share of the step? The compression hooks' step
    time and parity at that world size are the evidence beside it. The claim is about an
    interconnect's bandwidth: ranks exchanging gradients through one CPU's memory (gloo) measure
    per-call latency instead, and a share read off noisy steps decides nothing."""
    rows = [r for r in e.ok(AMP_MODES) if r.world_size and r.world_size > 1 and r.comm_share is not None]
    plain = [r for r in rows if r.comm_hook == "none"]
    if not plain:
        why = f"no {AMP_NAMES} DDP run with plain all-reduce at world size 2 or more"
        return NOT_MEASURED, why + (" (only world size 1)" if any(r.world_size for r in e.rows) else "")
    largest = max(r.world_size for r in plain)
    at = [r for r in plain if r.world_size == largest]
    shares = "; ".join(f"{r.where} {r.precision} {r.comm_share:.0%}" + (" (noisy)" if r.noisy else "") for r in at)
    evidence = f"communication share of the step at world size {largest}: {shares} (claim: >= {t.comm_bound_share:.0%})"
    hooks = [r for r in rows if r.world_size == largest and r.comm_hook != "none" and r.hook_step_ratio is not None]
    hooked = "; ".join(
        f"{r.precision} {r.comm_hook} hook: step x{r.hook_step_ratio.value:.2f}, parity {_verdict_of(r.hook_parity)}"
        for r in hooks
    )
    evidence += f"; compressed hooks vs float32 all-reduce: {hooked}" if hooked else "; no compressed hook run"
    if e.on_host:
        return NOT_MEASURED, f"ranks on one CPU (gloo) measure per-call latency, not an interconnect; {evidence}"
    steady = [r for r in at if not r.noisy]
    if not steady:
        return NOT_MEASURED, f"every such run was noisy; {evidence}"
    bound = [r for r in steady if r.comm_share >= t.comm_bound_share]
    return (SUPPORTED if bound else CONTRADICTED), evidence


def fp8_small_matmuls_slower(e: Evidence, t: Thresholds) -> Verdict:
    """Per fp8 recipe, the setups ordered by their work per step (bf16's FLOPs, the same model's):
    supported where the smallest is slower than bf16 and every slower one is smaller than every
    faster one (a crossover, or none within the sizes measured); contradicted where fp8 pays at
    the smallest size measured, or a larger size is slower than a smaller one that paid."""
    if e.on_host:
        return NOT_MEASURED, "fp8 matmuls on a CPU run in software (torch._scaled_mm's reference kernel)"
    bf16 = {r.setup: r for r in e.ok([BF16_BASELINE]) if r.tflops and r.step_time_ms}
    rows = [r for r in e.ok(FP8_MODES) if BF16_BASELINE in r.speedups and r.setup in bf16]
    if not rows:
        return NOT_MEASURED, "no fp8 run beside bf16 of the same setup (fp8-sweep.yaml measures the crossover)"
    verdicts, evidence = [], []
    for recipe in dict.fromkeys(r.precision for r in rows):
        by_size = sorted((r for r in rows if r.precision == recipe), key=lambda r: _gflop_per_step(bf16[r.setup]))
        listing = ", ".join(
            f"{r.where} ({_gflop_per_step(bf16[r.setup]):,.0f} GFLOP/step) {times(r.speedups[BF16_BASELINE].value)}"
            + (" (noisy)" if r.noisy else "")
            for r in by_size
        )
        pays = [r.speedups[BF16_BASELINE].value >= 1 for r in by_size]
        if len(by_size) < 2:
            evidence.append(f"{recipe} vs bf16 at one size only: {listing}")
            continue
        crossover = pays == sorted(pays)  # slower ones first, then only faster ones
        verdicts.append(SUPPORTED if not pays[0] and crossover else CONTRADICTED)
        evidence.append(f"{recipe} vs bf16, smallest work per step first: {listing}")
    if not verdicts:
        return NOT_MEASURED, "; ".join(evidence) + " (a crossover needs two sizes or more)"
    return (CONTRADICTED if CONTRADICTED in verdicts else SUPPORTED), "; ".join(evidence)


def _gflop_per_step(row: SummaryRow) -> float:
    return row.tflops * row.step_time_ms  # TFLOP/s x ms = GFLOP


def _verdict_of(parity: object) -> str:
    return getattr(parity, "verdict", "-")


CLAIMS: dict[str, tuple[str, Check]] = {
    "tensor_core_speedup": (
        "On tensor-core GPUs, matmul-heavy models train about 1.5-3x faster with AMP (against TF32 where the GPU"
        " has it, as published figures are, else fp32).",
        tensor_core_speedup,
    ),
    "launch_bound_little_gain": (
        "Small models dominated by kernel-launch overhead gain little from AMP.",
        launch_bound_little_gain,
    ),
    "bf16_keeps_parity": ("bf16 needs no loss scaler and keeps validation parity with fp32.", bf16_keeps_parity),
    "fp16_needs_scaler": (
        "fp16 without a loss scaler loses small gradients (they flush to zero); GradScaler keeps them.",
        fp16_needs_scaler,
    ),
    "amp_lowers_memory": ("AMP lowers peak memory.", amp_lowers_memory),
    "capability_rule": (
        "The capability rule (bf16 on 8.0+, fp16 with GradScaler on 7.x, no AMP below) picks the mode to train"
        " compute-bound models in: the one the measurement recommends, the fastest that keeps parity.",
        capability_rule,
    ),
    "loss_softmax_float32": ("Under autocast, the loss and softmax stay in float32.", loss_softmax_float32),
    "pre_volta_little_gain": ("Pre-Volta GPUs (no tensor cores) gain little from AMP.", pre_volta_little_gain),
    "ddp_communication_bound": (
        "Under DDP, autocast leaves gradients float32, so they are all-reduced in float32: where bandwidth is"
        " limited, communication rather than compute can become the bottleneck.",
        ddp_communication_bound,
    ),
    "fp8_small_matmuls_slower": (
        "torchao's float8 training: small matmuls get slower in fp8 than in bf16 (its casts and scales cost more"
        " than the faster matmul saves); fp8 pays off only above some size.",
        fp8_small_matmuls_slower,
    ),
}


def judge_claims(evidence: dict[str, Evidence], thresholds: Thresholds = THRESHOLDS) -> list[ClaimResult]:
    """`evidence`: machine id -> what it measured."""
    results = []
    for claim, (text, check) in CLAIMS.items():
        for machine_id, seen in evidence.items():
            verdict, why = check(seen, thresholds)
            results.append(ClaimResult(claim=claim, text=text, machine=machine_id, verdict=verdict, evidence=why))
    return results


def thresholds_dict(thresholds: Thresholds = THRESHOLDS) -> dict[str, float]:
    return asdict(thresholds)
