"""The stopping rule (analysis.sequential), run as the side-by-side runner would consult it, on
synthetic rounds of windows drawn like the recorded runs (docs/parity.md, scripts/busy_machine.py):

- a window is 100 steps, about 0.22 s for fp32 on the quiet VM; between windows a handover and the
  untimed first step of a turn, about 7 ms; turns go baseline then mode, then mode then baseline;
- each window's own noise, 2-5% (quiet windows within +-3-5%); a hiccup in 3% of windows, which run
  at 0.5-0.6x (a quiet MLP window at 16,530-16,988 samples/s against about 29,000);
- drift shared by both sides: a random walk of 1% a window and a trend of up to 1% a second;
- busy: busy_machine.py's hog, on for 0.2-1.5 s, then off for 0.2-1.5 s, slowing the machine to
  0.25-0.5x while on (busy fp32 windows ran 9,382-35,880 samples/s against about 29,000 quiet;
  bf16's 11,682-31,277). The simulated pairs' log-ratios spread like the recorded busy run's
  (bf16 at 0.50x [0.29, 0.85] over 6 windows: a standard deviation of about 0.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from amp_suite.analysis.quantities import FASTER, NO_GAIN
from amp_suite.analysis.sequential import (
    UNDECIDED,
    Decision,
    StoppingRule,
    _trimmed_mean,
    _trimmed_rows,
    critical_values,
    decide,
    trimmed_count,
)
from amp_suite.analysis.speedup import Contrast, interval

RULE = StoppingRule()
SEQUENCES = 2000


@dataclass(frozen=True)
class Machine:
    """The noise model, from the recorded runs (the module's docstring says which figure gave which)."""

    hog: bool
    window_s: float = 0.22
    handover_s: float = 0.007
    hog_period_s: tuple[float, float] = (0.2, 1.5)
    hog_speed: tuple[float, float] = (0.25, 0.5)
    window_noise: tuple[float, float] = (0.02, 0.05)
    hiccup_chance: float = 0.03
    hiccup_speed: tuple[float, float] = (0.5, 0.6)
    drift_per_window: float = 0.01
    trend_per_s: float = 0.01


BUSY, QUIET = Machine(hog=True), Machine(hog=False)


class Hog:
    """A neighbour switching on and off: the machine's speed over time, and how long work takes."""

    def __init__(self, machine: Machine, horizon_s: float, rng: np.random.Generator) -> None:
        periods = math.ceil(horizon_s / machine.hog_period_s[0]) + 2
        lengths = rng.uniform(*machine.hog_period_s, periods)
        self.ends = (np.cumsum(lengths) - rng.uniform(0, lengths[0])).tolist()
        on = np.arange(periods) % 2 == rng.integers(2)
        self.speeds = np.where(on, rng.uniform(*machine.hog_speed, periods), 1.0).tolist()
        self.index = 0

    def finish(self, start: float, work_s: float) -> float:
        """When work that takes `work_s` on the idle machine, started at `start`, ends."""
        clock, left = start, work_s
        while True:
            while self.ends[self.index] <= clock:
                self.index += 1
            speed, end = self.speeds[self.index], self.ends[self.index]
            if clock + left / speed <= end:
                return clock + left / speed
            left -= (end - clock) * speed
            clock = end


def one_run(machine: Machine, ratio: float, rounds: int, rng: np.random.Generator) -> list[float]:
    """One comparison's paired log-ratios, log(mode's window / baseline's), round by round."""
    hog = Hog(machine, horizon_s=rounds * 2 * 4 * machine.window_s, rng=rng) if machine.hog else None
    noise = np.exp(rng.normal(0, rng.uniform(*machine.window_noise), (rounds, 2))).tolist()
    hiccup = rng.random((rounds, 2)) < machine.hiccup_chance
    slowed = np.where(hiccup, rng.uniform(*machine.hiccup_speed, (rounds, 2)), 1.0).tolist()
    drift = np.cumsum(rng.normal(0, machine.drift_per_window, 2 * rounds)).reshape(rounds, 2).tolist()
    trend, clock, found = rng.uniform(-machine.trend_per_s, machine.trend_per_s), 0.0, []
    for r in range(rounds):
        rates = [0.0, 0.0]  # baseline, mode
        for turn, side in enumerate((0, 1) if r % 2 == 0 else (1, 0)):
            clock += machine.handover_s
            work = machine.window_s / ((ratio if side else 1.0) * math.exp(drift[r][turn] + trend * clock))
            end = hog.finish(clock, work) if hog else clock + work
            took = (end - clock) / (noise[r][side] * slowed[r][side])
            rates[side], clock = 1.0 / took, clock + took
        found.append(math.log(rates[1] / rates[0]))
    return found


def log_ratios(
    machine: Machine, ratio: float, seed: int, rounds: int = RULE.max_rounds, sequences: int = SEQUENCES
) -> np.ndarray:
    rng = np.random.default_rng(seed)  # fixed: the same sequences, the same rates, on every run
    return np.array([one_run(machine, ratio, rounds, rng) for _ in range(sequences)])


def first_decision(row: np.ndarray, rule: StoppingRule = RULE) -> Decision:
    """Look after every round from min_rounds on; stop at the first verdict or at the budget."""
    for rounds in rule.looks:
        decision = decide(row[:rounds], rule)
        if decision.verdict != UNDECIDED:
            break
    return decision


def naive_verdict(row: np.ndarray, rule: StoppingRule = RULE) -> str:
    """The same looks, stopping where the fixed 95% t interval first decides: analysis.speedup's
    interval from one side-by-side contrast (the pairs' spread over sqrt(rounds), rounds - 1
    degrees of freedom), centred on the mean log-ratio."""
    for rounds in rule.looks:
        mean, error = float(np.mean(row[:rounds])), float(np.std(row[:rounds], ddof=1)) / math.sqrt(rounds)
        low, high = interval(math.exp(mean), [Contrast(mean, error, rounds - 1, True)])
        if high < 1 + rule.worthwhile_gain:
            return NO_GAIN
        if low > 1:
            return FASTER
    return UNDECIDED


def share(verdicts: list[str], verdict: str) -> float:
    return sum(v == verdict for v in verdicts) / len(verdicts)


@pytest.fixture(scope="module")
def busy_equal() -> np.ndarray:
    return log_ratios(BUSY, 1.00, seed=1)


def test_at_equal_speed_peeking_says_faster_too_often_and_the_rule_does_not(busy_equal):
    rule = [first_decision(row).verdict for row in busy_equal]
    naive = [naive_verdict(row) for row in busy_equal]
    assert share(naive, FASTER) > RULE.alpha, f"naive peeking: {share(naive, FASTER):.1%} false 'faster'"
    assert share(rule, FASTER) <= RULE.alpha, f"the rule: {share(rule, FASTER):.1%} false 'faster'"


def test_a_ten_percent_gain_is_found_within_the_budget_on_a_quiet_machine():
    decisions = [first_decision(row) for row in log_ratios(QUIET, 1.10, seed=2)]
    found = share([d.verdict for d in decisions], FASTER)
    assert found >= 0.80, f"'faster' at 1.10 within {RULE.max_rounds} rounds: {found:.1%}"
    assert share([d.verdict for d in decisions], NO_GAIN) < 0.01


def test_on_a_busy_machine_the_default_budget_finds_a_ten_percent_gain_where_3x_would_not():
    """At the busy runs' spread, 3x the fixed schedule finds 1.10 about a third of the time; the
    default budget, 12x (72 rounds), in 80% or more (docs/parity.md gives the figures between)."""
    assert RULE.max_rounds == 72
    rows = log_ratios(BUSY, 1.10, seed=3, rounds=72)
    three_times = StoppingRule(max_rounds=18)  # 3x the fixed schedule: too short on a busy machine
    short = share([first_decision(row[:18], three_times).verdict for row in rows], FASTER)
    assert 0.2 < short < 0.5, f"'faster' at 1.10 within 18 busy rounds: {short:.1%}"
    longer = StoppingRule(max_rounds=72)
    found = share([first_decision(row, longer).verdict for row in rows], FASTER)
    assert found >= 0.80, f"'faster' at 1.10 within 72 busy rounds: {found:.1%}"


def test_the_boundary_is_exact_for_independent_normal_log_ratios():
    """Where the calibration's model holds, the error is alpha itself, not merely below it: the
    critical values are right, and the rule spends all of its error."""
    rows = np.random.default_rng(4).normal(0.0, 0.3, (2 * SEQUENCES, RULE.max_rounds))
    found = share([first_decision(row).verdict for row in rows], FASTER)
    tolerance = 3 * math.sqrt(RULE.alpha * (1 - RULE.alpha) / len(rows))
    assert abs(found - RULE.alpha) < tolerance, f"false 'faster' for normal log-ratios: {found:.2%}"


@pytest.mark.parametrize("ratio, verdict", [(0.5, NO_GAIN), (2.0, FASTER)])
def test_a_large_effect_is_decided_at_the_first_look(ratio, verdict):
    rows = log_ratios(QUIET, ratio, seed=5, sequences=200)
    decisions = [first_decision(row) for row in rows]
    assert all(d.verdict == verdict for d in decisions)
    at_first = sum(d.rounds == RULE.min_rounds for d in decisions) / len(decisions)
    assert at_first >= 0.95, f"decided after {RULE.min_rounds} rounds: {at_first:.1%}"


def test_a_hiccup_is_set_aside_and_moves_nothing():
    steady = [math.log(1.2) + 0.02 * math.sin(i) for i in range(8)]
    hit = [*steady[:3], math.log(1.2 * 0.55), *steady[4:]]  # one mode window at 0.55x
    clean, hiccup = decide(steady), decide(hit)
    assert 3 in hiccup.set_aside and len(hiccup.set_aside) == 2 * trimmed_count(8, RULE.trim)
    assert clean.verdict == hiccup.verdict == FASTER
    assert hiccup.ratio == pytest.approx(clean.ratio, rel=0.02)


def test_before_the_first_look_it_waits_and_past_the_budget_it_refuses():
    waiting = decide([0.1] * (RULE.min_rounds - 2))
    assert (waiting.verdict, waiting.interval, waiting.more_rounds) == (UNDECIDED, None, 2)
    with pytest.raises(ValueError, match=f"covers {RULE.max_rounds} rounds"):
        decide([0.1] * (RULE.max_rounds + 1))
    with pytest.raises(ValueError, match="finite"):
        decide([0.1] * 5 + [math.inf])


def test_an_undecided_comparison_projects_the_rounds_it_would_need():
    pattern = np.linspace(-1.0, 1.0, 12)[np.random.default_rng(6).permutation(12)]  # its trimmed mean is 0
    narrow, wide = decide(math.log(1.02) + 0.06 * pattern), decide(math.log(1.02) + 0.12 * pattern)
    assert narrow.verdict == wide.verdict == UNDECIDED
    assert narrow.more_rounds is not None and wide.more_rounds is not None
    # The same centre at twice the spread: four times the rounds, counted from the start.
    assert (wide.more_rounds + 12) == pytest.approx(4 * (narrow.more_rounds + 12), rel=0.1)
    assert decide(math.log(1.5) + 0.03 * pattern).more_rounds is None


def test_rounds_that_fit_a_budget_in_seconds():
    assert RULE.rounds_that_fit(rounds_done=6, seconds_spent=3.0, budget_s=6.5) == 7
    assert RULE.rounds_that_fit(rounds_done=6, seconds_spent=3.0, budget_s=60.0) == RULE.max_rounds - 6
    assert RULE.rounds_that_fit(rounds_done=6, seconds_spent=3.0, budget_s=2.0) == 0
    with pytest.raises(ValueError):
        RULE.rounds_that_fit(rounds_done=0, seconds_spent=0.0, budget_s=10.0)


@pytest.mark.parametrize(
    "settings", [{"alpha": 0.0}, {"min_rounds": 3}, {"min_rounds": 10, "max_rounds": 8}, {"max_rounds": 500},
                 {"trim": 0.5}, {"worthwhile_gain": 0.0}],
)  # fmt: skip
def test_a_rule_that_cannot_hold_its_guarantee_is_refused(settings):
    with pytest.raises(ValueError):
        StoppingRule(**settings)


def test_decide_and_its_calibration_compute_the_same_statistic():
    rng = np.random.default_rng(7)
    for rounds in (6, 7, 13, 18):
        rows = np.sort(rng.standard_cauchy((5, rounds)), axis=1)
        cut = trimmed_count(rounds, RULE.trim)
        centres, errors = _trimmed_rows(rows, cut)
        for row, centre, error in zip(rows, centres, errors, strict=True):
            assert _trimmed_mean(row.tolist(), cut) == pytest.approx((centre, error), rel=1e-9)
    assert len(critical_values(RULE)) == len(RULE.looks)
