"""The words for the summary's quantities, one way for every surface: the report, the terminal, MLflow.

Each function takes a typed value (amp_suite.analysis.quantities) or None, and answers "-" where
there is nothing to say. No markup here: a surface styles the words, never rewrites them.
"""

from __future__ import annotations

from amp_suite.analysis.quantities import FAIL, INDICATIVE, INVALID, NOT_JUDGED, PASS, Parity, ParityVerdict, Ratio
from amp_suite.analysis.time_to_target import TimeToTarget
from amp_suite.config.precisions import REFERENCE

NOTHING = "-"
# What a parity verdict is called wherever people read one: the terminal, the report, MLflow and the
# answer. The verdict itself is data (records, the report's JSON), which keeps its value.
PARITY_WORDS: dict[ParityVerdict, str] = {
    PASS: "pass", FAIL: "fail", INDICATIVE: "indicative", INVALID: "invalid", NOT_JUDGED: "not judged",
}  # fmt: skip
AT_RISK_FLAG = "at risk:"  # before a verdict that reads as no failure but is beyond the margin


def times(value: float | None) -> str:
    """A ratio's value: "1.90x"."""
    return NOTHING if value is None else f"{value:.2f}x"


def percent(share: float | None) -> str:
    """A share of a whole: "87%"."""
    return NOTHING if share is None else f"{share:.0%}"


def interval_words(interval: tuple[float, float] | None) -> str:
    """" [1.80, 2.00]", or "" without an interval."""
    return "" if interval is None else f" [{interval[0]:.2f}, {interval[1]:.2f}]"


def ratio_words(ratio: Ratio | None) -> str:
    """"1.90x [1.80, 2.00]": the value with its 95% interval, where it has one."""
    return NOTHING if ratio is None else times(ratio.value) + interval_words(ratio.interval)


def p_value_words(p_value: float) -> str:
    """A p-value in a few characters: "p=0.037", or "p<0.001" where it is too small to print usefully."""
    return "p<0.001" if p_value < 0.001 else f"p={p_value:.2g}"


def seeds_words(count: int) -> str:
    return "1 seed" if count == 1 else f"{count} seeds"


def at_risk(parity: Parity) -> bool:
    """A verdict that reads as no failure but is beyond the margin (one seed's delta): to be flagged."""
    return parity.beyond_tolerance and parity.verdict != FAIL


def rule_words(parity: Parity) -> str:
    """The rule behind a verdict: "t-test p=0.15, 3 seeds"; an older record's rule by name:
    "noise-floor rule"; nothing for one seed."""
    if parity.p_value is not None:
        return f"t-test {p_value_words(parity.p_value)}, {seeds_words(parity.seeds)}"
    return f"{parity.method} rule" if parity.method != "t-test" and parity.verdict != INDICATIVE else ""


def gap_words(parity: Parity) -> str:
    """The degradation against the margin: "+0.002 / 0.018"."""
    return f"{parity.delta:+.3g} / {parity.tolerance:.3g}"


def verdict_word(parity: Parity) -> str:
    return PARITY_WORDS[parity.verdict]


def risk_flag(parity: Parity) -> str:
    """"at risk: " where the verdict is to be read with that flag, else ""."""
    return f"{AT_RISK_FLAG} " if at_risk(parity) else ""


def parity_words(parity: Parity | None) -> str:
    """E.g. "pass (+0.002 / 0.018, t-test p=0.012, 3 seeds)"; a one-seed delta beyond its margin says so
    first: "at risk: indicative (-0.062 / 0.0176)"; invalid says what differed."""
    if parity is None:
        return NOTHING
    if parity.verdict == INVALID:
        return f"{verdict_word(parity)}: {parity.invalid.words if parity.invalid else 'other data'}"
    if parity.verdict == NOT_JUDGED:
        return f"{verdict_word(parity)}: {parity.unlearned}"
    test = rule_words(parity)
    return f"{risk_flag(parity)}{verdict_word(parity)} ({gap_words(parity)}{', ' + test if test else ''})"


def parity_brief(parity: Parity | None) -> str:
    """A verdict beside the value it judges: "pass (p=0.012)", "at risk: indicative", "fail"."""
    if parity is None:
        return NOTHING
    if parity.p_value is not None:
        return f"{verdict_word(parity)} ({p_value_words(parity.p_value)})"
    return f"{risk_flag(parity)}{verdict_word(parity)}"


def parity_parts(parity: Parity) -> tuple[str, str, str]:
    """A verdict in the parts a surface styles apart, tersely: the flag, the verdict's word, the rest
    ("at risk:", "indicative", " -0.062 / 0.0176"; "", "invalid", ": other batches"); the terminal's."""
    word = verdict_word(parity)
    if parity.verdict == INVALID:  # the sides saw other data or batches: nothing compared (the answer says which seed)
        batches = parity.invalid is not None and parity.invalid.kind == "batch order"
        return "", word, ": other batches" if batches else ": other data"
    if parity.verdict == NOT_JUDGED:  # fp32 itself learned nothing: matching it says nothing of accuracy
        return "", word, f": {REFERENCE} did not learn"
    test = f" {p_value_words(parity.p_value)}" if parity.p_value is not None else ""
    test += f" ({parity.method})" if parity.method != "t-test" and parity.verdict != INDICATIVE else ""  # an older rule
    return (AT_RISK_FLAG if at_risk(parity) else ""), word, f" {gap_words(parity)}{test}"


def verdict_words(parity: Parity | None) -> str:
    """A verdict and its delta, where the margin is said elsewhere: "pass (+0.0012)"."""
    return NOTHING if parity is None else f"{verdict_word(parity)} ({parity.delta:+.4g})"


def evidence_words(parity: Parity) -> str:
    """What a verdict rests on, as an answer cites it: "t-test p=0.15, 3 seeds", or "1 seed"."""
    return rule_words(parity) if parity.p_value is not None else seeds_words(parity.seeds)


def target_words(reach: TimeToTarget | None) -> str:
    """The speedup to target against fp32 with the seeds that reached it: "1.61x [1.40, 1.85] (3/3 seeds)",
    "never (0/3 seeds)", or "2/3" where there is no speedup to give."""
    if reach is None:
        return NOTHING
    if reach.speedup is None:
        return f"never ({reach.counted} seeds)" if not reach.reached else reach.counted
    return f"{times(reach.speedup)}{interval_words(reach.speedup_interval)} ({reach.counted} seeds)"


def reach_words(reach: TimeToTarget, precision: str) -> str:
    """E.g. "bf16 reaches val_accuracy 0.9 in 0.62x fp32's time (speedup to target 1.61x [1.40, 1.85],
    3 seeds)"; where fp32 fell short too, it says so: the target, not the mode, is out of reach."""
    if not reach.reached:
        fp32_too = "" if reach.short_of_fp32 else "; nor does fp32, on those seeds"
        return f"{precision} never reaches {reach.described} ({seeds_words(reach.seeds)}){fp32_too}"
    partly = "" if reach.all_reached else f" on {reach.reached} of {reach.seeds} seeds"
    if reach.speedup is None:
        return f"{precision} reaches {reach.described}{partly} ({reach.seconds:.3g} s of training)"
    sooner = times(reach.speedup) + interval_words(reach.speedup_interval)
    return (
        f"{precision} reaches {reach.described}{partly} in {1 / reach.speedup:.2f}x fp32's time"
        f" (speedup to target {sooner}, {seeds_words(reach.reached)})"
    )
