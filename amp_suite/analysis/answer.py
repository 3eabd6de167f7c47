"""The answer people run amp-suite for, per machine and comparison: which precision mode to train
in, how much faster than the fp32 reference it is, what it does to memory, and whether accuracy
survives. No torch here.

Speed, against fp32, is one of three verdicts (`speed`), from the speedup's 95% interval
(analysis.speedup: every seed's windows, paired where the cells ran side by side, and the seeds):
- no gain: the interval lies below 1 + WORTHWHILE_GAIN (the mode gains less than that, if anything);
  where the machine moved (below), only if the cells ran side by side (their interval has the move
  in it);
- faster: otherwise, the interval lies above 1, and the machine held still: no cell of either mode
  varied beyond NOISY_SPREAD across its windows, and the GPU did not slow down for heat or a
  hardware limit (its steady power cap does not count: both sides of a pair run under it);
- unclear: anything else: the interval straddles 1 and reaches past that gain, or the machine moved.
Accuracy is lost when the parity test fails with a mean degradation beyond the margin; at risk when
the test fails within it (not shown to keep accuracy), when one seed's delta is beyond it, or when
the mode falls short of the workload's target on a seed; not judged when it saw other data than
fp32 (invalid).

The answer (`verdict`): "recommended", the faster mode that keeps accuracy (the capability rule's
pick where the fastest is not shown to beat it by WORTHWHILE_GAIN, so that noise does not choose
between modes measured alike); else "inconclusive" where a mode that keeps accuracy is unclear (the
words say why and what to rerun); else "stay" with fp32: the faster modes lose accuracy, or none
gains. Negative controls are never recommended. Where the workload declares a target, the answer
gives the time to it beside the throughput speedup. Where the static capability rule (`amp-suite
doctor`) picks another mode than the measurement would among the modes the rule chooses from, the
answer says so: the rule reads the datasheet, the answer the stopwatch. Every surface prints this
judgement, the report's capability-rule claim included; none re-derives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from amp_suite.analysis.bound import host_bound_words
from amp_suite.analysis.quantities import (  # noqa: F401  (the speed verdicts: re-exported where they are judged)
    FAIL,
    FASTER,
    INDICATIVE,
    NO_GAIN,
    NOT_JUDGED,
    UNCLEAR,
    WORTHWHILE_GAIN,
    ParityVerdict,
    Ratio,
    SpeedVerdict,
)
from amp_suite.analysis.quantities import INVALID as INVALID_PARITY
from amp_suite.analysis.summary import SummaryRow
from amp_suite.analysis.words import PARITY_WORDS, evidence_words, interval_words, ratio_words, reach_words, times
from amp_suite.config.base import SKIPPED
from amp_suite.config.precisions import AMP_MODES, BF16_BASELINE, FP8_MODES, MODE_BY_NAME, REFERENCE
from amp_suite.hardware.backends import backend_recorded
from amp_suite.hardware.capability import recommend
from amp_suite.records.machine import Machine
from amp_suite.records.results import TimingStop

Accuracy = Literal["kept", "at risk", "lost", "not compared", "not judged", "invalid"]
KEPT, AT_RISK, LOST, NOT_COMPARED, INVALID = "kept", "at risk", "lost", "not compared", "invalid"
UNJUDGED = "not judged"  # fp32 itself learned nothing: the answer is about speed only
Verdict = Literal["recommended", "stay", "inconclusive", "no answer"]
RECOMMENDED, STAY, INCONCLUSIVE, NO_ANSWER = "recommended", "stay", "inconclusive", "no answer"
# NVML reasons that say the GPU changed its state while timed; its power cap is its steady state under
# load, the same for every window of a side-by-side pair (a change it causes shows in the windows).
STEADY_LIMITS = frozenset({"sw_power_cap"})
_PACE = f"{REFERENCE}'s speed"


@dataclass(frozen=True)
class Answer:
    machine: str  # the machine's key (a report maps it to its id)
    setup: str  # the comparison: every precision of one workload configuration
    matrix: str
    workload: str
    batch: str  # as tables show it: "64", "max 512"
    variant: str  # "eager", "compiled (default)", ...
    verdict: Verdict  # recommended (mode), stay (with fp32), inconclusive, no answer (nothing to compare)
    mode: str | None  # the recommended mode: an AMP or TF32 mode, fp32 to stay with, None: inconclusive or no answer
    speedup: float | None  # the recommended mode's throughput / fp32's
    speedup_interval: tuple[float, float] | None  # 95%, with two or more seeds on both sides
    memory_ratio: float | None  # its peak memory / fp32's
    parity: ParityVerdict | None  # its parity verdict against fp32: pass, fail, indicative
    accuracy: Accuracy  # kept, at risk, lost or not compared: of the recommended mode, or with fp32 recommended, of
    # the mode that came closest (the fastest candidate): whether accuracy survives mixed precision here
    seeds: int  # the runs behind the recommended mode's figures
    sentence: str  # the answer in one line
    rule: str | None = None  # the capability rule's mode, from the machine's record
    rule_holds: bool | None = None  # the measurement, among the rule's modes, picks it; None: it can't tell
    rule_disagrees: str | None = None  # the sentence, when the rule and the measurement differ
    rule_note: str | None = None  # the same, beside the answer: no figure its sentence already gives
    host_bound: bool = False  # a compared mode's step was set by the host's launches (analysis.bound)
    timed: str | None = None  # side by side: how long the comparison was timed and why it stopped, in words
    arms: str = ""  # the comparisons that are arms of the same model (SummaryRow.arms)


def answers(rows: Sequence[SummaryRow], machines: dict[str, Machine]) -> list[Answer]:
    """One answer per machine and comparison (every precision of one workload configuration)."""
    groups: dict[tuple[str, str], list[SummaryRow]] = {}
    for row in rows:
        groups.setdefault((row.machine, row.setup), []).append(row)
    found = [_answer(group, machines.get(machine)) for (machine, _), group in groups.items()]
    return [_with_arms(answer, found) for answer in found]


def _with_arms(answer: Answer, found: Sequence[Answer]) -> Answer:
    """A host-bound answer, with what its sibling arms measured here (the same model with CUDA graphs,
    a fused optimizer, another layout): the remedies for the bound, already measured."""
    siblings = [
        other for other in found
        if other.machine == answer.machine and other.arms == answer.arms and other.setup != answer.setup
    ]  # fmt: skip
    if not answer.host_bound or not siblings:
        return answer
    told = "; ".join(f"{other.workload} ({other.variant}): {_short(other)}" for other in siblings)
    return replace(answer, sentence=f"{answer.sentence}. Measured here beside it: {told}")


def _short(answer: Answer) -> str:
    """An answer in a few words: "bf16 at 2.10x [1.95, 2.26] fp32's speed", "inconclusive"."""
    if answer.mode is None or answer.verdict == STAY:
        return answer.verdict if answer.mode is None else f"stay with {REFERENCE}"
    return f"{answer.mode} at {times(answer.speedup)}{interval_words(answer.speedup_interval)} {REFERENCE}'s speed"


def accuracy(row: SummaryRow) -> Accuracy:
    """What the row's parity, and its time to target, say about accuracy, in a word. A fail whose
    mean degradation is within the margin was not shown to keep accuracy (too few seeds, or too
    noisy): at risk, not lost. A mode that falls short of the target on a seed is at risk too."""
    p = row.parity
    if p is not None and p.verdict == INVALID_PARITY:
        return INVALID
    if p is not None and p.verdict == FAIL:
        return LOST if p.lost else AT_RISK
    if (p is not None and p.beyond_tolerance) or _short_of_target(row):
        return AT_RISK
    if p is not None and p.verdict == NOT_JUDGED:
        return UNJUDGED
    return NOT_COMPARED if p is None else KEPT


def _short_of_target(row: SummaryRow) -> bool:
    """Short of the target on a seed where fp32 reached it (a target fp32 misses too says nothing of the mode)."""
    return row.time_to_target is not None and row.time_to_target.short_of_fp32 > 0


@dataclass(frozen=True)
class Speed:
    """A mode's speed against fp32, as a verdict, and, where it is unclear, why in words."""

    verdict: SpeedVerdict
    why: str | None = None
    moved: bool = False  # unclear because the machine changed under the run (not for want of precision)
    out_of_budget: bool = False  # unclear when sequential timing's budget ran out: its words say how much more


def speed(row: SummaryRow, reference: SummaryRow) -> Speed:
    """The row's speed verdict against the reference's (see the module's docstring)."""
    moved = machine_moved(row, reference)
    if row.speedup is None or row.speedup.interval is None:
        why = f"{row.precision} ran at {ratio_words(row.speedup)} {_PACE} with no interval (no windows recorded)"
        return Speed(UNCLEAR, why)
    low, high = row.speedup.interval
    # Timed round by round until the stopping rule decided, side by side: the pairs carry whatever the
    # machine did, and the rule's interval is built to hold on a busy one (analysis.sequential).
    ruled = row.speedup.side_by_side and row.timing_stop is not None and row.timing_stop.rule == "sequential"
    if high < 1 + WORTHWHILE_GAIN and (moved is None or row.speedup.side_by_side):
        return Speed(NO_GAIN)
    if low > 1 and (moved is None or ruled):
        return Speed(FASTER)
    if ruled:
        return Speed(UNCLEAR, _budget_words(row), out_of_budget=True)
    if moved is not None:
        return Speed(UNCLEAR, f"{moved}: the machine changed under the run", moved=True)
    return Speed(UNCLEAR, f"{row.precision} ran at {_speed_words(row, _PACE)}: within this run's noise")


def timed_words(stop: TimingStop | None) -> str | None:
    """How long a side-by-side comparison was timed, and why it stopped: "decided after 7 rounds of
    turns (140 steps a cell, 13 s)"; None where its cells ran alone."""
    if stop is None:
        return None
    steps = f"{stop.steps:,} steps a cell, " if stop.steps is not None else ""
    spent = f"{stop.rounds} rounds of turns ({steps}{stop.seconds:.0f} s)"
    if stop.stopped == "decided":
        return f"timed until decided: {spent}"
    if stop.stopped == "budget":
        more = f"; about {stop.more_rounds} more rounds projected" if stop.more_rounds else ""
        return f"timed until the budget ran out, undecided: {spent}{more}"
    return f"timed on the fixed schedule: {spent}"


def _budget_words(row: SummaryRow) -> str:
    """Why a sequentially timed mode is still unclear: how long it was timed, and how much more the
    interval it stopped on suggests would decide it."""
    stop = row.timing_stop
    assert stop is not None
    spent = f"{row.precision} ran at {_speed_words(row, _PACE)}"
    spent += f" after {stop.rounds} rounds of turns ({stop.seconds:.0f} s)"
    if stop.stopped != "budget":
        return f"{spent}, undecided"
    more = f"; at this spread about {stop.more_rounds} more rounds would decide it" if stop.more_rounds else ""
    return f"{spent}, when the timing budget ran out{more}. Raise the matrix's stopping budget to measure longer"


def machine_moved(row: SummaryRow, reference: SummaryRow) -> str | None:
    """What says the machine changed while either mode was timed, in words, or None. A host-bound
    side's spread is the host's jitter (analysis.bound), not a sign that the machine changed."""
    moved = []
    for side in (reference, row):
        if side.noisy and side.throughput_range is not None and not host_bound(side):
            low, high = side.throughput_range
            moved.append(f"{side.precision} ran between {low:,.0f} and {high:,.0f} {side.unit}")
        changes = [reason for reason in side.throttle_reasons if reason not in STEADY_LIMITS]
        if changes:
            moved.append(f"the GPU slowed down ({', '.join(changes)}) while {side.precision} was timed")
    return "; ".join(moved) or None


def host_bound(row: SummaryRow) -> bool:
    return row.bound is not None and row.bound.host_bound


def _host_words(compared: Sequence[SummaryRow], reference: SummaryRow) -> str:
    """Where a compared mode was host-bound: every mode's bound with its figures, the GPU work each
    saved against fp32 where traced, and what would move the bound; else ""."""
    if not any(host_bound(r) for r in compared):
        return ""
    sides = [reference, *(r for r in compared if r is not reference)]
    saved = [f"{r.precision} {ratio_words(r.gpu_work_ratio)}" for r in sides[1:] if r.gpu_work_ratio is not None]
    cut = f" The GPU's own work per step, cut against {REFERENCE}'s: {', '.join(saved)}" if saved else ""
    return f". {host_bound_words([(r.precision, r.bound) for r in sides])}{cut}"


def _answer(group: list[SummaryRow], machine: Machine | None) -> Answer:
    reference = next((r for r in group if r.precision == REFERENCE), None)
    candidates = [r for r in group if _candidate(r)]
    first = reference or group[0]
    where = {
        "machine": first.machine,
        "setup": first.setup,
        "matrix": first.matrix,
        "workload": first.workload,
        "batch": first.batch,
        "variant": first.variant,
    }
    if first.kernel_benchmark:
        return _benchmark_answer(group, machine, where)
    if reference is None or reference.throughput is None:
        why = f"{REFERENCE} {reference.status}" if reference else f"{REFERENCE} was not run"
        return Answer(**where, **_no_mode(), sentence=f"no answer: {why}, and every mode is compared with it")
    if not candidates:
        return _without_candidates(group, reference, machine, where)
    invalid = [r for r in candidates if accuracy(r) == INVALID]
    candidates = [r for r in candidates if r not in invalid]
    if not candidates:
        return Answer(**where, **_no_mode(), sentence=f"no answer: {_invalid_words(invalid)}")
    judged = _judge(candidates, reference, machine)
    chosen, sentence = judged.chosen, judged.sentence + _host_words(candidates, reference)
    if accuracy(judged.considered) == UNJUDGED:  # whatever the sentence says of accuracy, nothing was judged
        sentence = f"{speed_only_words(judged.considered)}. {sentence}"
    if invalid:
        sentence += f"; {_invalid_words(invalid)}"
    rule, holds, disagrees, note = _rule(machine, candidates, reference, said=judged.named)
    return Answer(
        **where,
        timed=timed_words(reference.timing_stop),
        host_bound=any(host_bound(r) for r in candidates),
        arms=first.arms,
        verdict=judged.verdict,
        mode=chosen and chosen.precision,
        **_speedup_fields(chosen and chosen.speedup),
        memory_ratio=chosen.memory_ratio.value if chosen and chosen.memory_ratio else None,
        parity=chosen.parity.verdict if chosen and chosen.parity else None,
        accuracy=accuracy(judged.considered),
        seeds=chosen.runs if chosen else 0,
        sentence=sentence,
        rule=rule,
        rule_holds=holds,
        rule_disagrees=disagrees,
        rule_note=note,
    )


def _without_candidates(group: list[SummaryRow], reference: SummaryRow, machine: Machine | None, where: dict) -> Answer:
    """Only fp32 finished. Where the capability rule says this device has no AMP hardware and every
    other mode was skipped for it, that is the answer: stay in fp32 (and --force measures the
    emulation the skips avoided). Otherwise nothing was compared, and the answer says so."""
    caps = machine.caps if machine else None
    advice = recommend(caps) if caps else None
    others = [r for r in group if r is not reference]
    amp = [r for r in others if r.precision in AMP_MODES]  # what the rule chooses among, and --force can run
    if advice is None or advice.precision != REFERENCE or not amp or any(r.status != SKIPPED for r in others):
        return Answer(**where, **_no_mode(), sentence=f"no answer: no mode but {REFERENCE} finished{_skips(group)}")
    skipped = ", ".join(r.precision for r in amp)
    sentence = (
        f"stay in {REFERENCE}: {advice.reason} ({skipped} skipped);"
        f" `amp-suite run --force` measures the emulation anyway"
    )
    return Answer(
        **where, **(_no_mode() | {"verdict": STAY, "mode": REFERENCE, "seeds": reference.runs}),
        sentence=sentence, rule=advice.precision, rule_holds=True, timed=timed_words(reference.timing_stop),
    )  # fmt: skip


def speed_only_words(row: SummaryRow) -> str:
    """Where fp32 learned nothing, no mode's accuracy is judged: the answer is about speed alone."""
    assert row.parity is not None and row.parity.unlearned
    return f"speed only: accuracy not judged ({row.parity.unlearned})"


def _benchmark_answer(group: list[SummaryRow], machine: Machine | None, where: dict) -> Answer:
    """A kernel benchmark's answer (torchao's float8 one): its fp8 modes against bf16, the side it was
    published against, in GPU kernel time; nothing is learned, so no accuracy. Its `speedup` is over
    bf16's. On a CPU its times are the ops' CPU times: a rehearsal of the program, not judged."""
    base = next((r for r in group if r.precision == BF16_BASELINE), None)
    if base is None or base.throughput is None:
        why = f"{BF16_BASELINE} {base.status}" if base else f"{BF16_BASELINE} was not run"
        sentence = f"no answer: {why}, and a benchmark's fp8 modes are compared with it"
        return Answer(**where, **_no_mode(), sentence=sentence)
    if machine is not None and backend_recorded(machine.device_type).is_host:  # no GPU kernels to time
        sentence = (
            f"not judged: on a {machine.device_type.upper()} the benchmark's times are its ops' CPU times, not the"
            " GPU kernel times it measures (a rehearsal of the program)"
        )
        return Answer(**where, **_no_mode(), sentence=sentence)
    ran = [r for r in group if r.precision in FP8_MODES and r.speedups.get(BF16_BASELINE) is not None]
    if not ran:
        return Answer(**where, **_no_mode(), sentence=f"no answer: no fp8 mode finished{_skips(group)}")
    pace = f"{BF16_BASELINE}'s speed in GPU kernel time"
    fastest = max(ran, key=lambda r: r.speedups[BF16_BASELINE].value)
    against = fastest.speedups[BF16_BASELINE]
    low, high = against.interval or (against.value, against.value)
    kept = {"accuracy": NOT_COMPARED, "memory_ratio": None, "parity": None, "seeds": fastest.runs}
    if low > 1:
        sentence = f"{fastest.precision}: {ratio_words(against)} {pace}; nothing learned: no accuracy to judge"
        return Answer(**where, verdict=RECOMMENDED, mode=fastest.precision, **_speedup_fields(against), **kept,
                      sentence=sentence)  # fmt: skip
    if high < 1 + WORTHWHILE_GAIN:
        faster = f"its fastest fp8 mode, {fastest.precision}, ran at {ratio_words(against)} {pace}"
        sentence = f"stay with {BF16_BASELINE}: {faster}"
        return Answer(**where, verdict=STAY, mode=BF16_BASELINE, **_speedup_fields(None), **kept, sentence=sentence)
    sentence = f"inconclusive: {fastest.precision} ran at {ratio_words(against)} {pace}. Rerun with more steps"
    return Answer(**where, verdict=INCONCLUSIVE, mode=None, **_speedup_fields(None), **kept, sentence=sentence)


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    chosen: SummaryRow | None  # the mode, the reference to stay with, None when inconclusive
    considered: SummaryRow  # the row whose accuracy the answer reports
    sentence: str
    named: tuple[SummaryRow, ...]  # the rows whose speed the sentence gives


def _judge(candidates: list[SummaryRow], reference: SummaryRow, machine: Machine | None) -> Judgement:
    speeds = {r.precision: speed(r, reference) for r in candidates}
    keeps = [r for r in candidates if accuracy(r) in (KEPT, NOT_COMPARED, UNJUDGED)]
    safe = [r for r in keeps if speeds[r.precision].verdict == FASTER]
    unclear = sorted((r for r in keeps if speeds[r.precision].verdict == UNCLEAR), key=_speed)
    # A mode that may be faster (or is) but does not keep accuracy: fp32, whatever its speed.
    risky = sorted((r for r in candidates if speeds[r.precision].verdict != NO_GAIN and r not in keeps), key=_speed)
    if safe:
        chosen = _preferred(safe, machine)
        sentence = f"{chosen.precision}: {_speed_words(chosen)}, {_memory_words(chosen)}, {_accuracy_words(chosen)}"
        sentence += _target_words(chosen)
        if risky and _speed(risky[-1]) > _speed(chosen):
            sentence += f"; {_risk_words(risky[-1])}"
            return Judgement(RECOMMENDED, chosen, chosen, sentence, (chosen, risky[-1]))
        return Judgement(RECOMMENDED, chosen, chosen, sentence, (chosen,))
    if unclear:
        found = speeds[unclear[-1].precision]
        rerun = "Rerun on a quiet machine, or with repeats: 3" if found.moved else "Rerun with repeats: 3"
        if host_bound(unclear[-1]):  # its jitter is the host's: more of the same host decides nothing
            rerun = "More repeats measure the host again"
        words = found.why if found.out_of_budget else f"{found.why}. {rerun}"  # its words say what to do
        return Judgement(INCONCLUSIVE, None, unclear[-1], f"inconclusive: {words}", (unclear[-1],))
    if risky:
        sentence = f"stay with {REFERENCE}: {_risk_words(risky[-1])}"
        return Judgement(STAY, reference, risky[-1], sentence, (risky[-1],))
    considered = max(candidates, key=_speed)
    words = _speed_words(considered, _PACE)
    sentence = (
        f"no mode beats {REFERENCE} by {WORTHWHILE_GAIN:.0%} or more here: the fastest, {considered.precision},"
        f" ran at {words}"
    )
    if reference.step_time_ms is not None:
        sentence += f"; an {REFERENCE} step takes {reference.step_time_ms:.3g} ms"
    sentence += f"; {_risk_words(considered)}" if accuracy(considered) in (AT_RISK, LOST) else _target_words(considered)
    return Judgement(STAY, reference, considered, sentence, (considered,))


def _preferred(faster: list[SummaryRow], machine: Machine | None) -> SummaryRow:
    """The fastest, or the capability rule's pick where the fastest is not shown to beat it by
    WORTHWHILE_GAIN (the fastest's interval starts below the pick's top end plus that gain): which
    of two modes measured alike is faster is noise, and the answer must not flip with it."""
    fastest = max(faster, key=_speed)
    pick = recommend(machine.caps).precision if machine and machine.caps else None
    ruled = next((r for r in faster if r.precision == pick), None)
    ours, theirs = (ruled.speedup if ruled else None), fastest.speedup
    if ruled is not None and ours and ours.interval and theirs and theirs.interval:
        if theirs.interval[0] < ours.interval[1] * (1 + WORTHWHILE_GAIN):
            return ruled
    return fastest


def _candidate(row: SummaryRow) -> bool:
    mode = MODE_BY_NAME.get(row.precision)
    return mode is not None and not mode.reference and not mode.control and row.throughput is not None


def _speed(row: SummaryRow) -> float:
    return row.speedup.value if row.speedup else 0.0


def _speedup_fields(speedup: Ratio | None) -> dict:
    return {"speedup": speedup and speedup.value, "speedup_interval": speedup and speedup.interval}


def _no_mode() -> dict:
    return {
        "verdict": NO_ANSWER,
        "mode": None,
        **_speedup_fields(None),
        "memory_ratio": None,
        "parity": None,
        "accuracy": NOT_COMPARED,
        "seeds": 0,
    }


def _skips(group: list[SummaryRow]) -> str:
    reasons = [f"{r.precision} {r.status}" for r in group if r.precision != REFERENCE and r.throughput is None]
    return f" ({', '.join(reasons)})" if reasons else ""


def _speed_words(row: SummaryRow, comparison: str = "faster") -> str:
    """E.g. "1.90x [1.80, 2.00] faster", or "1.35x faster (no interval)"; an fp8 mode adds its
    speed against bf16, the mode it would replace: "(1.21x [1.10, 1.32] bf16's speed)"."""
    words = f"{ratio_words(row.speedup)} {comparison}"
    if row.speedup is None or row.speedup.interval is None:
        words += " (no interval)"
    if row.precision in FP8_MODES and (against := row.speedups.get(BF16_BASELINE)) is not None:
        words += f" ({ratio_words(against)} {BF16_BASELINE}'s speed)"
    return words


def _memory_words(row: SummaryRow) -> str:
    return "memory not measured" if row.memory_ratio is None else f"{row.memory_ratio.value:.2f}x memory"


def _accuracy_words(row: SummaryRow) -> str:
    if row.parity is None:
        return "accuracy not compared (no validation on both sides)"
    if row.parity.verdict == NOT_JUDGED:
        return f"accuracy not judged ({row.parity.unlearned})"
    if row.parity.verdict == INDICATIVE:
        return f"accuracy kept on one seed ({PARITY_WORDS[INDICATIVE]}: run more seeds for a verdict)"
    return f"accuracy kept ({evidence_words(row.parity)})"


def _risk_words(row: SummaryRow) -> str:
    speed = _speed(row)
    pace = f"is {speed:.2f}x faster" if speed > 1 else f"runs at {speed:.2f}x {REFERENCE}'s speed"
    faster = f"{row.precision} {pace}"
    p = row.parity
    if p is None or (p.verdict != FAIL and not p.beyond_tolerance):  # short of its target
        assert row.time_to_target is not None
        return f"{faster} but {reach_words(row.time_to_target, row.precision)}"
    gap = f"{p.delta:+.3g} against a margin of {p.tolerance:.3g}"
    if p.lost:
        return f"{faster} but loses accuracy: {gap} ({evidence_words(p)})"
    if p.verdict == FAIL:
        bound = f"up to {p.upper_bound:.3g} worse" if p.upper_bound is not None else "worse"
        shown = f"{gap}, could be {bound} ({evidence_words(p)})"
        return f"{faster} but keeping accuracy is not shown: {shown}; run more seeds"
    return f"{faster} but accuracy is at risk: {gap}, one seed; run more seeds"


def _target_words(row: SummaryRow) -> str:
    """Time to target beside the throughput speedup, and where the two disagree, that they do."""
    reach = row.time_to_target
    if reach is None:
        return ""
    words = f"; {reach_words(reach, row.precision)}"
    if reach.speedup is not None and reach.speedup < 1 <= _speed(row):
        words += ": faster steps, but no sooner to the target"
        if row.skipped_steps:
            words += f" (GradScaler skipped {row.skipped_steps:.3g} steps)"
    return words


def _invalid_words(rows: list[SummaryRow]) -> str:
    return "; ".join(
        f"{r.precision} not compared with {REFERENCE}, which saw other data ({_difference(r)})"
        for r in rows
    )


def _difference(row: SummaryRow) -> str:
    """What the row's seeds saw otherwise than fp32's, in words."""
    return row.parity.invalid.words if row.parity and row.parity.invalid else "unknown"


def _rule(
    machine: Machine | None, candidates: list[SummaryRow], reference: SummaryRow, said: tuple[SummaryRow, ...]
) -> tuple[str | None, bool | None, str | None, str | None]:
    """The capability rule's pick for this machine; whether the measurement picks it too, judged as
    the answer is but among the modes the rule chooses from (fp32 and the AMP modes: TF32 and fp8
    are no choice of the rule's); a sentence where they differ; and that sentence as a note beside
    the answer, which leaves out the pick's speed where the answer gives it already (`said`).
    None where the measurement can't tell: inconclusive among those modes, or none of them ran but fp32."""
    caps = machine.caps if machine else None
    if caps is None:
        return None, None, None, None
    advice = recommend(caps)
    among = [r for r in candidates if r.precision in AMP_MODES]
    if not among:
        return advice.precision, None, None, None
    judged = _judge(among, reference, machine)
    verdict, chosen = judged.verdict, judged.chosen
    if chosen is None:  # inconclusive: says nothing either way
        return advice.precision, None, None, None
    if chosen.precision == advice.precision:
        return advice.precision, True, None, None
    ran = next((r for r in among if r.precision == advice.precision), None)
    rule = f"the capability rule recommends {advice.precision} ({advice.reason})"
    measured = f"; {chosen.precision} is the one to train in among {', '.join((REFERENCE, *AMP_MODES))}"
    measured = measured if verdict == RECOMMENDED else ""
    if ran is None:
        disagrees = f"{rule}; this comparison did not measure {advice.precision}{measured}"
        return advice.precision, False, disagrees, disagrees
    disagrees = f"{rule}; measured, {advice.precision} ran at {_speed_words(ran, _PACE)}{measured}"
    note = f"{rule}, which the measurement above does not bear out{measured}" if ran in said else disagrees
    return advice.precision, False, disagrees, note
