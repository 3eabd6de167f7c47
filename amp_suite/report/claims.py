"""The autocast article's claims, judged per machine from its records. No torch here.

Each claim gets, per machine, `supported`, `contradicted` or `not measured here`, and the
numbers behind the verdict. Every threshold lives in THRESHOLDS (the README quotes them). A
parity-based claim counts only pass/fail verdicts: an "indicative" one (a single fp32 seed, no
noise floor) decides nothing, so a one-seed matrix leaves those claims not measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from pydantic import BaseModel

from amp_suite.capability import DeviceCaps, recommend
from amp_suite.machine import Machine
from amp_suite.results import CellRecord
from amp_suite.summary import SummaryRow


@dataclass(frozen=True)
class Thresholds:
    tensor_core_speedup: float = 1.5  # "on the order of 1.5-3x": the low end, against fp32
    little_gain: float = 1.2  # "little gain": the best AMP mode is at most this much faster than fp32
    memory_ratio: float = 1.0  # "lowers peak memory": the median AMP/fp32 peak-memory ratio is below this
    underflow_fraction: float = 0.01  # a workload "has small gradients" when this share is below fp16's floor
    recommendation_slack: float = 0.05  # the recommended mode counts as fastest within 5% of the fastest


THRESHOLDS = Thresholds()
AMP_MODES = ("fp16", "bf16")
MATMUL_HEAVY = ("resnet", "transformer")  # workload kinds whose step is mostly matmul/conv
LAUNCH_BOUND = ("mlp",)  # a small model whose step is mostly kernel launches
SOFTMAX_OPS = ("_softmax", "softmax", "_log_softmax", "log_softmax")
ClaimVerdict = Literal["supported", "contradicted", "not measured here"]


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
    kinds: dict[str, str]  # workload name -> kind (resnet, transformer, mlp)

    def ok(self, precisions: Sequence[str], kinds: Sequence[str] | None = None) -> list[SummaryRow]:
        return [
            row for row in self.rows
            if row.precision in precisions and row.runs and (kinds is None or self.kinds.get(row.workload) in kinds)
        ]  # fmt: skip


Verdict = tuple[ClaimVerdict, str]
Check = Callable[[Evidence, Thresholds], Verdict]


def _best_speedups(rows: list[SummaryRow]) -> dict[str, SummaryRow]:
    """Per workload and batch size, the AMP row with the highest speedup against fp32."""
    best: dict[str, SummaryRow] = {}
    for row in rows:
        if row.speedup is None:
            continue
        where = row.where
        if where not in best or row.speedup > best[where].speedup:
            best[where] = row
    return best


def _speedups_text(best: dict[str, SummaryRow]) -> str:
    return "; ".join(f"{where} {row.precision} {row.speedup:.2f}x" for where, row in best.items())


def tensor_core_speedup(e: Evidence, t: Thresholds) -> Verdict:
    if not e.machine.tensor_cores:
        return "not measured here", "this device has no tensor cores"
    best = _best_speedups(e.ok(AMP_MODES, MATMUL_HEAVY))
    if not best:
        return "not measured here", "no fp16/bf16 run of a matmul-heavy workload (resnet, transformer) with fp32"
    low = [where for where, row in best.items() if row.speedup < t.tensor_core_speedup]
    verdict = "contradicted" if low else "supported"
    return verdict, f"best AMP speedup over fp32: {_speedups_text(best)} (claim: >= {t.tensor_core_speedup}x)"


def launch_bound_little_gain(e: Evidence, t: Thresholds) -> Verdict:
    if e.machine.device_type != "cuda":
        return "not measured here", "kernel-launch overhead is a GPU effect; this is a CPU"
    best = _best_speedups(e.ok(AMP_MODES, LAUNCH_BOUND))
    if not best:
        return "not measured here", "no fp16/bf16 run of the small MLP with fp32"
    high = [where for where, row in best.items() if row.speedup > t.little_gain]
    verdict = "contradicted" if high else "supported"
    return verdict, f"best AMP speedup over fp32: {_speedups_text(best)} (claim: <= {t.little_gain}x)"


def bf16_keeps_parity(e: Evidence, t: Thresholds) -> Verdict:
    rows = [r for r in e.rows if r.precision == "bf16" and r.status != "skipped"]
    judged = [r for r in rows if r.parity and r.parity.verdict in ("pass", "fail")]
    if not judged:
        why = "bf16 runs have only indicative verdicts (one seed): run repeats >= 2" if rows else "no bf16 run"
        return "not measured here", why
    failed = [r for r in judged if r.parity.verdict == "fail"]
    listing = "; ".join(f"{r.where} {r.parity.verdict} ({r.parity.delta:+.4g})" for r in judged)
    return ("contradicted" if failed else "supported"), f"bf16 without a loss scaler: {listing}"


def fp16_needs_scaler(e: Evidence, t: Thresholds) -> Verdict:
    noscale = {r.setup: r for r in e.rows if r.precision == "fp16-noscale" and r.parity}
    scaled = {r.setup: r for r in e.rows if r.precision == "fp16" and r.parity}
    fp32 = {r.setup: r for r in e.rows if r.precision == "fp32"}
    findings, verdicts = [], set()
    for key, row in noscale.items():
        underflow = fp32[key].grad_underflow_fraction if key in fp32 else None
        if row.parity.verdict not in ("pass", "fail") or underflow is None or underflow < t.underflow_fraction:
            continue  # no noise floor, or no small gradients to lose
        with_scaler = scaled[key].parity.verdict if key in scaled else "not run"
        verdicts.add("supported" if row.parity.verdict == "fail" and with_scaler != "fail" else "contradicted")
        findings.append(
            f"{row.where}: {underflow:.0%} of gradients below fp16's floor;"
            f" without a scaler parity {row.parity.verdict}, with GradScaler {with_scaler}"
        )
    if not findings:
        return "not measured here", (
            f"no fp16-noscale run judged on a workload with >= {t.underflow_fraction:.0%} of gradients below"
            " fp16's floor (see experiments/failure-modes.yaml)"
        )
    return ("contradicted" if "contradicted" in verdicts else "supported"), "; ".join(findings)


def amp_lowers_memory(e: Evidence, t: Thresholds) -> Verdict:
    ratios = [r for r in e.ok(AMP_MODES) if r.memory_ratio is not None]
    if not ratios:
        return "not measured here", "no fp16/bf16 run with an fp32 baseline"
    median = statistics.median(r.memory_ratio for r in ratios)
    listing = "; ".join(f"{r.where} {r.precision} {r.memory_ratio:.2f}" for r in ratios)
    verdict = "supported" if median < t.memory_ratio else "contradicted"
    return verdict, f"median AMP/fp32 peak memory {median:.2f} (claim: < {t.memory_ratio}): {listing}"


def capability_rule(e: Evidence, t: Thresholds) -> Verdict:
    caps = _caps(e.machine)
    if caps is None:
        return "not measured here", "the records do not say what this device does fast"
    advice = recommend(caps)
    findings, contradicted = [], False
    for setup in dict.fromkeys(r.setup for r in e.rows):
        rows = [r for r in e.rows if r.setup == setup and r.runs and r.throughput]
        kept = [r for r in rows if r.precision == "fp32" or (r.parity and r.parity.verdict == "pass")]
        recommended = next((r for r in kept if r.precision == advice.precision), None)
        if recommended is None or len(kept) < 2:
            continue  # the recommended mode did not run or keep parity with a noise floor
        fastest = max(kept, key=lambda r: r.throughput)
        holds = recommended.throughput >= (1 - t.recommendation_slack) * fastest.throughput
        contradicted |= not holds
        findings.append(
            f"{recommended.where}: recommended {advice.precision} {recommended.throughput:,.0f} {recommended.unit},"
            f" fastest that kept parity {fastest.precision} {fastest.throughput:,.0f}"
        )
    if not findings:
        return "not measured here", (
            f"the rule recommends {advice.precision} here; no workload has it and another mode with"
            " pass/fail parity verdicts (run repeats >= 2)"
        )
    return ("contradicted" if contradicted else "supported"), f"{advice.reason}. " + "; ".join(findings)


def loss_softmax_float32(e: Evidence, t: Thresholds) -> Verdict:
    audits = [r for r in e.records if r.precision in AMP_MODES and r.status == "ok" and r.dtype_audit]
    if not audits:
        return "not measured here", "no dtype audit of an fp16/bf16 run"
    lapses = []
    for record in audits:
        audit = record.dtype_audit
        if not audit.get("checks", {}).get("loss_float32", False):
            lapses.append(f"{record.cell_id}: the loss was not float32")
        for op in audit.get("ops", []):
            if op.get("phase") == "forward" and op.get("op") in SOFTMAX_OPS and op.get("output_dtypes") != ["float32"]:
                lapses.append(f"{record.cell_id}: {op['op']} gave {', '.join(op['output_dtypes'])}")
    if lapses:
        return "contradicted", "; ".join(dict.fromkeys(lapses))
    return "supported", f"{len(audits)} audited fp16/bf16 step(s): loss and every softmax op in float32"


def pre_volta_little_gain(e: Evidence, t: Thresholds) -> Verdict:
    if e.machine.device_type != "cuda" or e.machine.tensor_cores is not False:
        return "not measured here", "not a pre-Volta GPU (compute capability below 7.0)"
    best = _best_speedups(e.ok(AMP_MODES))
    if not best:
        return "not measured here", "no fp16/bf16 run with fp32 (pass --force: they are skipped on pre-Volta GPUs)"
    high = [where for where, row in best.items() if row.speedup > t.little_gain]
    return ("contradicted" if high else "supported"), f"best AMP speedup: {_speedups_text(best)}"


CLAIMS: dict[str, tuple[str, Check]] = {
    "tensor_core_speedup": (
        "On tensor-core GPUs, matmul-heavy models train about 1.5-3x faster with AMP than in fp32.",
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
        "The capability rule (bf16 on 8.0+, fp16 with GradScaler on 7.x, no AMP below) picks the fastest"
        " mode that keeps parity.",
        capability_rule,
    ),
    "loss_softmax_float32": ("Under autocast, the loss and softmax stay in float32.", loss_softmax_float32),
    "pre_volta_little_gain": ("Pre-Volta GPUs (no tensor cores) gain little from AMP.", pre_volta_little_gain),
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


def _caps(machine: Machine) -> DeviceCaps | None:
    flags = (machine.tensor_cores, machine.fast_fp16, machine.fast_bf16, machine.tf32)
    if any(flag is None for flag in flags):
        return None
    capability = None
    if machine.compute_capability:
        major, _, minor = machine.compute_capability.partition(".")
        capability = (int(major), int(minor or 0))
    return DeviceCaps(machine.device_type, machine.device_name, capability, *flags)  # type: ignore[arg-type]
