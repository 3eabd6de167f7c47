"""The answer people run amp-suite for, per machine and comparison: which precision mode to train
in, how much faster than the fp32 reference it is, what it does to memory, and whether accuracy
survives. No torch here.

A mode is faster when its speedup over fp32 is beyond noise: its 95% interval lies above 1, or,
with a single seed (no interval), the speedup exceeds 1 + NOISY_SPREAD. Its accuracy is lost when
its parity test fails with a mean degradation beyond the margin; at risk when the test fails within
it (not shown to keep accuracy), when one seed's delta is beyond it, or when the mode falls short of
the workload's target on a seed; not judged when it saw other data than fp32 (invalid). Where the
workload declares a target, the answer gives the time to it beside the throughput speedup, and says
so where faster steps did not reach it sooner. The answer recommends the fastest mode that is
faster and not at risk, says so when a faster mode was at risk, and says "no mode beats fp32" when
none is faster. Negative controls are never recommended. Where the static capability rule
(`amp-suite doctor`) picks another mode than the measurement, the answer says so: the rule reads
the datasheet, the answer the stopwatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amp_suite.analysis.summary import Parity, SummaryRow, p_value_words
from amp_suite.config import NOISY_SPREAD
from amp_suite.config.precisions import BF16_BASELINE, FP8_MODES, MODE_BY_NAME, REFERENCE
from amp_suite.hardware.capability import recommend
from amp_suite.hardware.machine import Machine

KEPT, AT_RISK, LOST, NOT_COMPARED, INVALID = "kept", "at risk", "lost", "not compared", "invalid"


@dataclass(frozen=True)
class Answer:
    machine: str  # the machine's key (a report maps it to its id)
    setup: str  # the comparison: every precision of one workload configuration
    matrix: str
    workload: str
    batch: str  # as tables show it: "64", "max 512"
    variant: str  # "eager", "compiled (default)", ...
    mode: str | None  # the recommended mode: an AMP or TF32 mode, fp32 when none beats it, None: no answer
    speedup: float | None  # the recommended mode's throughput / fp32's
    speedup_interval: tuple[float, float] | None  # 95%, with two or more seeds on both sides
    memory_ratio: float | None  # its peak memory / fp32's
    parity: str | None  # its parity verdict against fp32: pass, fail, indicative
    accuracy: str  # kept, at risk, lost or not compared: of the recommended mode, or with fp32 recommended, of
    # the mode that came closest (the fastest candidate): whether accuracy survives mixed precision here
    seeds: int  # the runs behind the recommended mode's figures
    sentence: str  # the answer in one line
    rule: str | None = None  # the capability rule's mode, from the machine's record
    rule_disagrees: str | None = None  # the sentence, when the rule and the measurement differ


def answers(rows: Sequence[SummaryRow], machines: dict[str, Machine]) -> list[Answer]:
    """One answer per machine and comparison (every precision of one workload configuration)."""
    groups: dict[tuple[str, str], list[SummaryRow]] = {}
    for row in rows:
        groups.setdefault((row.machine, row.setup), []).append(row)
    return [_answer(group, machines.get(machine)) for (machine, _), group in groups.items()]


def accuracy(row: SummaryRow) -> str:
    """What the row's parity, and its time to target, say about accuracy, in a word. A fail whose
    mean degradation is within the margin was not shown to keep accuracy (too few seeds, or too
    noisy): at risk, not lost. A mode that falls short of the target on a seed is at risk too."""
    p = row.parity
    if p is not None and p.verdict == "invalid":
        return INVALID
    if p is not None and p.verdict == "fail":
        return LOST if p.lost else AT_RISK
    if (p is not None and p.beyond_tolerance) or _short_of_target(row):
        return AT_RISK
    return NOT_COMPARED if p is None else KEPT


def _short_of_target(row: SummaryRow) -> bool:
    """Short of the target on a seed where fp32 reached it (a target fp32 misses too says nothing of the mode)."""
    return row.time_to_target is not None and row.time_to_target.short_of_fp32 > 0


def faster(row: SummaryRow) -> bool:
    """Faster than fp32 beyond noise: the interval above 1, or one seed beyond NOISY_SPREAD."""
    if row.speedup is None:
        return False
    if row.speedup_interval is not None:
        return row.speedup_interval[0] > 1
    return row.speedup > 1 + NOISY_SPREAD


def _answer(group: list[SummaryRow], machine: Machine | None) -> Answer:
    reference = next((r for r in group if r.precision == REFERENCE), None)
    candidates = [r for r in group if _candidate(r)]
    first = reference or group[0]
    where = {"machine": first.machine, "setup": first.setup, "matrix": first.matrix, "workload": first.workload,
             "batch": first.batch, "variant": first.variant}  # fmt: skip
    if reference is None or reference.throughput is None:
        why = f"{REFERENCE} {reference.status}" if reference else f"{REFERENCE} was not run"
        return Answer(**where, **_no_mode(), sentence=f"no answer: {why}, and every mode is compared with it")
    if not candidates:
        sentence = f"no answer: no mode but {REFERENCE} finished" + _skips(group)
        return Answer(**where, **_no_mode(), sentence=sentence)
    invalid = [r for r in candidates if accuracy(r) == INVALID]
    candidates = [r for r in candidates if r not in invalid]
    if not candidates:
        return Answer(**where, **_no_mode(), sentence=f"no answer: {_invalid_words(invalid)}")
    safe = sorted((r for r in candidates if faster(r) and accuracy(r) in (KEPT, NOT_COMPARED)), key=_speed)
    risky = sorted((r for r in candidates if faster(r) and accuracy(r) in (AT_RISK, LOST)), key=_speed)
    if safe:
        chosen = considered = safe[-1]
        sentence = f"{chosen.precision}: {_speed_words(chosen)}, {_memory_words(chosen)}, {_accuracy_words(chosen)}"
        sentence += _target_words(chosen)
        if risky and _speed(risky[-1]) > _speed(chosen):
            sentence += f"; {_risk_words(risky[-1])}"
    elif risky:
        chosen, considered = reference, risky[-1]
        sentence = f"stay with {REFERENCE}: {_risk_words(considered)}"
    else:
        chosen, considered = reference, max(candidates, key=_speed)
        speed = _speed_words(considered, f"{REFERENCE}'s speed")
        sentence = f"no mode beats {REFERENCE} beyond noise here: the fastest, {considered.precision}, ran at {speed}"
        if reference.step_time_ms is not None:
            sentence += f"; an {REFERENCE} step takes {reference.step_time_ms:.3g} ms"
        if accuracy(considered) in (AT_RISK, LOST):
            sentence += f"; {_risk_words(considered)}"
        else:
            sentence += _target_words(considered)
    if invalid:
        sentence += f"; {_invalid_words(invalid)}"
    rule, disagrees = _rule(machine, chosen.precision, group)
    return Answer(
        **where, mode=chosen.precision, speedup=chosen.speedup, speedup_interval=chosen.speedup_interval,
        memory_ratio=chosen.memory_ratio, parity=chosen.parity.verdict if chosen.parity else None,
        accuracy=accuracy(considered), seeds=chosen.runs, sentence=sentence, rule=rule, rule_disagrees=disagrees,
    )  # fmt: skip


def _candidate(row: SummaryRow) -> bool:
    mode = MODE_BY_NAME.get(row.precision)
    return mode is not None and not mode.reference and not mode.control and row.throughput is not None


def _speed(row: SummaryRow) -> float:
    return row.speedup or 0.0


def _no_mode() -> dict:
    return {"mode": None, "speedup": None, "speedup_interval": None, "memory_ratio": None, "parity": None,
            "accuracy": NOT_COMPARED, "seeds": 0}  # fmt: skip


def _skips(group: list[SummaryRow]) -> str:
    reasons = [f"{r.precision} {r.status}" for r in group if r.precision != REFERENCE and r.throughput is None]
    return f" ({', '.join(reasons)})" if reasons else ""


def _speed_words(row: SummaryRow, comparison: str = "faster") -> str:
    """E.g. "1.90x [1.80, 2.00] faster", or "1.35x faster (one seed: no interval)"; an fp8 mode adds
    its speed against bf16, the mode it would replace: "(1.21x [1.10, 1.32] bf16's speed)"."""
    if row.speedup_interval is None:
        words = f"{row.speedup:.2f}x {comparison} (one seed: no interval)"
    else:
        low, high = row.speedup_interval
        words = f"{row.speedup:.2f}x [{low:.2f}, {high:.2f}] {comparison}"
    if row.precision in FP8_MODES and row.speedup_vs_bf16 is not None:
        against = row.speedup_vs_bf16_interval
        shown = f" [{against[0]:.2f}, {against[1]:.2f}]" if against else ""
        words += f" ({row.speedup_vs_bf16:.2f}x{shown} {BF16_BASELINE}'s speed)"
    return words


def _memory_words(row: SummaryRow) -> str:
    return "memory not measured" if row.memory_ratio is None else f"{row.memory_ratio:.2f}x memory"


def _accuracy_words(row: SummaryRow) -> str:
    if row.parity is None:
        return "accuracy not compared (no validation on both sides)"
    if row.parity.verdict == "indicative":
        return "accuracy kept on one seed (indicative: run more seeds for a verdict)"
    return f"accuracy kept ({_test_words(row.parity)})"


def _risk_words(row: SummaryRow) -> str:
    speed = row.speedup or 0.0
    pace = f"is {speed:.2f}x faster" if speed > 1 else f"runs at {speed:.2f}x {REFERENCE}'s speed"
    faster = f"{row.precision} {pace}"
    p = row.parity
    if p is None or (p.verdict != "fail" and not p.beyond_tolerance):  # short of its target
        assert row.time_to_target is not None
        return f"{faster} but {row.time_to_target.words(row.precision)}"
    gap = f"{p.delta:+.3g} against a margin of {p.tolerance:.3g}"
    if p.lost:
        return f"{faster} but loses accuracy: {gap} ({_test_words(p)})"
    if p.verdict == "fail":
        bound = f"up to {p.upper_bound:.3g} worse" if p.upper_bound is not None else "worse"
        return f"{faster} but keeping accuracy is not shown: {gap}, could be {bound} ({_test_words(p)}); run more seeds"
    return f"{faster} but accuracy is at risk: {gap}, one seed; run more seeds"


def _test_words(p: Parity) -> str:
    """E.g. "t-test p=0.15, 3 seeds"."""
    test = f"t-test {p_value_words(p.p_value)}, " if p.p_value is not None else ""
    return f"{test}{_seeds(p.seeds)}"


def _target_words(row: SummaryRow) -> str:
    """Time to target beside the throughput speedup, and where the two disagree, that they do."""
    reach = row.time_to_target
    if reach is None:
        return ""
    words = f"; {reach.words(row.precision)}"
    if reach.speedup is not None and reach.speedup < 1 <= (row.speedup or 0):
        words += ": faster steps, but no sooner to the target"
        if row.skipped_steps:
            words += f" (GradScaler skipped {row.skipped_steps:.3g} steps)"
    return words


def _invalid_words(rows: list[SummaryRow]) -> str:
    return "; ".join(f"{r.precision} not compared with {REFERENCE}, which saw other data ({r.invalid})" for r in rows)


def _seeds(runs: int) -> str:
    return "1 seed" if runs == 1 else f"{runs} seeds"


def _rule(machine: Machine | None, measured: str, group: list[SummaryRow]) -> tuple[str | None, str | None]:
    """The capability rule's pick for this machine, and a sentence where the measurement disagrees."""
    caps = machine.caps if machine else None
    if caps is None:
        return None, None
    advice = recommend(caps)
    if advice.precision == measured:
        return advice.precision, None
    ran = next((r for r in group if r.precision == advice.precision and r.speedup is not None), None)
    if ran is None:
        found = f"this comparison did not measure {advice.precision}"
    else:
        found = f"measured, {advice.precision} ran at {ran.speedup:.2f}x {REFERENCE}'s speed"
    return advice.precision, f"the capability rule recommends {advice.precision} ({advice.reason}); {found}"
