"""When to stop timing a comparison: a stopping rule on the paired windows' log-ratios whose error
holds however often it is consulted. No torch here.

Side by side, round r gives one paired log-ratio per mode, log(mode's window r / its baseline's
window r) (execution.side_by_side). After each round from `min_rounds` to `max_rounds`, `decide`
says "faster", "no gain" or "undecided" from a repeated confidence interval on the ratio.

Why not the fixed interval. analysis.speedup's 95% t interval is valid at one look planned in
advance. Looked at after every round and trusted the first time it clears 1, it says "faster" far
more often than 2.5% of the time when nothing is faster (Armitage, McPherson & Rowe 1969, JRSS A
132:235-244; the simulation in tests/unit/analysis/test_sequential.py measures it).

The method: repeated confidence intervals (Jennison & Turnbull 1984, Controlled Clinical Trials
5:33-45; Jennison & Turnbull 2000, "Group Sequential Methods with Applications to Clinical Trials",
ch. 9) with Pocock's boundary (Pocock 1977, Biometrika 64:191-199): one nominal level at every
look, chosen so that over all the planned looks the chance that the lower bound ever passes above
the true ratio is `alpha`, and likewise for the upper bound passing below it. At look n:

    trimmed mean of the n log-ratios +- c_n x its standard error,

Yuen's studentised trimmed mean (Tukey & McLaughlin 1963, Sankhya A 25:331-352; Yuen 1974,
Biometrika 61:165-170): g = floor(trim x n) pairs set aside at each end (fewer where that would
keep under MIN_KEPT), the error sqrt((n - 1) s_w^2 / (h (h - 1))) from the winsorised variance s_w^2,
h = n - 2g the pairs kept. Trimming is the rule's robustness: a hiccup on one side of one pair, or a
pair split by a neighbour's load switching on or off between its two windows, lands in a tail and is
set aside instead of widening the interval or moving its centre.

The critical values c_n are exact for independent normal log-ratios, as for the sequential t-test
(Jennison & Turnbull 1991, Biometrika 78:133-141): the studentised statistic's joint law over the
looks is the same whatever the true ratio and spread, so it is computed once per rule, by simulating
that law (CALIBRATION_PATHS seeded paths: the Monte Carlo error on the error rate is about +-0.1%).
Under the noise of busy-machine runs (heavy tails, hiccups, neighbouring pairs correlated by a load
switching on and off) the guarantee is checked by simulation, not proven; a load that switches in
step with the turns biases every pair alike, which no rule on the pairs can see (docs/parity.md).

What it guarantees, and what a caller must keep:
- a false "faster" (the ratio is at most 1) with chance at most `alpha` over every look from
  min_rounds to max_rounds, wherever the caller stops; a false "no gain" (the ratio is 1 +
  worthwhile_gain or more) likewise. The interval is a (1 - 2 alpha) repeated interval: it holds the
  ratio at every look at once with that chance, so the one at whichever look the caller stopped
  holds it too (Jennison & Turnbull 2000, eq. 9.2). It is wider than the fixed 95% interval.
- one look per round, rounds min_rounds..max_rounds: fewer looks are fine, more are not (`decide`
  refuses more than max_rounds log-ratios). Round r's two windows ran next to each other.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Literal

from amp_suite.analysis.quantities import FASTER, NO_GAIN, WORTHWHILE_GAIN
from amp_suite.config.base import WINDOWS

if TYPE_CHECKING:
    import numpy as np

StopVerdict = Literal["faster", "no gain", "undecided"]
UNDECIDED = "undecided"
BUDGET_FACTOR = 12  # the default budget: this many times the fixed schedule's rounds (config.matrix)
# The most rounds a rule may plan for: its calibration holds a few arrays of CALIBRATION_PATHS x
# max_rounds numbers (about 60 MB each at 120) and takes a few seconds, once per process.
MAX_ROUNDS = 120
# Trimming keeps at least this many pairs: a trimmed mean of three has so heavy-tailed a
# studentised law that its look would need c_n near 9, a look that decides nothing.
MIN_KEPT = 4
CALIBRATION_PATHS = 1 << 16
CALIBRATION_SEED = 50  # any fixed seed: the same boundary in every process


def trimmed_count(rounds: int, trim: float) -> int:
    """The pairs set aside at each end of `rounds` log-ratios."""
    return max(0, min(math.floor(trim * rounds), (rounds - MIN_KEPT) // 2))


@dataclass(frozen=True)
class StoppingRule:
    """The rule's error level and budget in rounds (the seconds budget is the caller's: `rounds_that_fit`).

    alpha: the chance, over all looks, of a false "faster"; and, separately, of a false "no gain".
    trim: the share of pairs set aside at each end. 0.33: in the busy-machine simulation a switching
    neighbour splits about half the pairs; trimming 0.2 let those pairs, correlated from one round to
    the next, push false "faster" past 5% over 36 rounds or more, and within 72 rounds 0.33 found a
    10% gain in 85% of the runs where 0.25 found it in 68% and 0.3 in 80%.
    """

    alpha: float = 0.05
    min_rounds: int = WINDOWS
    max_rounds: int = BUDGET_FACTOR * WINDOWS
    worthwhile_gain: float = WORTHWHILE_GAIN
    trim: float = 0.33

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 0.5:
            raise ValueError("alpha must lie between 0 and 0.5")
        if not MIN_KEPT <= self.min_rounds <= self.max_rounds <= MAX_ROUNDS:
            raise ValueError(f"rounds must satisfy {MIN_KEPT} <= min_rounds <= max_rounds <= {MAX_ROUNDS}")
        if not 0 < self.worthwhile_gain < 1:
            raise ValueError("worthwhile_gain must lie between 0 and 1")
        if not 0 <= self.trim < 0.5:
            raise ValueError("trim must lie between 0 and 0.5")

    @property
    def looks(self) -> range:
        return range(self.min_rounds, self.max_rounds + 1)

    @property
    def level(self) -> float:
        """The interval's simultaneous coverage: each of its bounds errs with chance alpha."""
        return 1 - 2 * self.alpha

    def rounds_that_fit(self, rounds_done: int, seconds_spent: float, budget_s: float) -> int:
        """How many more rounds fit in `budget_s` at the mean time a round has taken so far, and
        within max_rounds."""
        if rounds_done < 1 or seconds_spent <= 0:
            raise ValueError("rounds_that_fit needs at least one round and the seconds it took")
        per_round = seconds_spent / rounds_done
        fit = math.floor(max(0.0, budget_s - seconds_spent) / per_round)
        return max(0, min(fit, self.max_rounds - rounds_done))


DEFAULT_RULE = StoppingRule()


@dataclass(frozen=True)
class Decision:
    """What the rule says after `rounds` rounds, for one mode against its baseline."""

    verdict: StopVerdict
    rounds: int
    ratio: float | None  # the trimmed mean's ratio; None before min_rounds
    interval: tuple[float, float] | None  # the rule's (1 - 2 alpha) repeated interval; None before min_rounds
    more_rounds: int | None  # undecided: the rounds its centre and spread project to a decision (before
    # min_rounds: the rounds to the first look)
    set_aside: tuple[int, ...] = ()  # indices of the rounds the trimmed mean left out, at either end


def decide(log_ratios: Sequence[float], rule: StoppingRule = DEFAULT_RULE) -> Decision:
    """The verdict, interval and projection after len(log_ratios) rounds (see the module's docstring)."""
    values = [float(value) for value in log_ratios]
    rounds = len(values)
    if not all(math.isfinite(value) for value in values):
        raise ValueError("log_ratios must be finite numbers (a window at 0 has no log-ratio)")
    if rounds > rule.max_rounds:
        raise ValueError(f"the rule's guarantee covers {rule.max_rounds} rounds; {rounds} were given")
    if rounds < rule.min_rounds:
        return Decision(UNDECIDED, rounds, None, None, rule.min_rounds - rounds)
    order = sorted(range(rounds), key=values.__getitem__)
    cut = trimmed_count(rounds, rule.trim)
    centre, error = _trimmed_mean([values[i] for i in order], cut)
    half = critical_values(rule)[rounds - rule.min_rounds] * error
    low, high = centre - half, centre + half
    verdict = _verdict(low, high, rule)
    more = _more_rounds(centre, error, rounds, rule) if verdict == UNDECIDED else None
    set_aside = tuple(sorted(order[:cut] + order[rounds - cut :]))
    return Decision(verdict, rounds, math.exp(centre), (math.exp(low), math.exp(high)), more, set_aside)


def _verdict(low: float, high: float, rule: StoppingRule) -> StopVerdict:
    # "no gain" first, as analysis.answer.speed judges: an interval inside (1, 1 + gain) gains too little.
    if high < math.log1p(rule.worthwhile_gain):
        return NO_GAIN
    if low > 0:
        return FASTER
    return UNDECIDED


def _more_rounds(centre: float, error: float, rounds: int, rule: StoppingRule) -> int:
    """Rounds until the interval would decide, were its centre and its spread per round (error x
    sqrt(rounds)) to stay as they are, at the last look's critical value: it decides first against
    the line its centre lies farther from ("faster": above 1; "no gain": below 1 + gain). A
    projection, not a promise (an undecided centre tends to lie nearer the lines than the truth: in
    simulation it overstates); past max_rounds, a guide to the budget to ask for."""
    distance = max(centre, math.log1p(rule.worthwhile_gain) - centre)  # > 0: the two add up to log(1 + gain)
    spread = error * math.sqrt(rounds)
    needed = math.ceil((critical_values(rule)[-1] * spread / distance) ** 2)
    return max(1, needed - rounds)


def _trimmed_mean(ordered: list[float], cut: int) -> tuple[float, float]:
    """The trimmed mean of ascending values and Yuen's standard error. `_trimmed_rows` is the same
    statistic for the calibration's arrays (a test holds them equal); plain floats here, because
    `decide` runs after every round of every mode and this is four times faster than numpy's."""
    rounds, kept = len(ordered), len(ordered) - 2 * cut
    middle = ordered[cut : rounds - cut]
    winsorised = [middle[0]] * cut + middle + [middle[-1]] * cut
    mean = sum(winsorised) / rounds
    variance = sum((value - mean) ** 2 for value in winsorised) / (rounds - 1)
    return sum(middle) / kept, math.sqrt(variance * (rounds - 1) / (kept * (kept - 1)))


def _trimmed_rows(ordered: np.ndarray, cut: int) -> tuple[np.ndarray, np.ndarray]:
    """`_trimmed_mean` of each row of an array whose rows are in ascending order."""
    import numpy as np

    rounds, kept = ordered.shape[1], ordered.shape[1] - 2 * cut
    middle = ordered[:, cut : rounds - cut]
    ends = middle[:, [0, -1]]  # the winsorised values: the middle, and each end's value cut times more
    total = middle.sum(axis=1) + cut * ends.sum(axis=1)
    squares = (middle**2).sum(axis=1) + cut * (ends**2).sum(axis=1)
    variance = (squares - total**2 / rounds) / (rounds - 1)
    return middle.mean(axis=1), np.sqrt(variance * (rounds - 1) / (kept * (kept - 1)))


def critical_values(rule: StoppingRule) -> tuple[float, ...]:
    """c_n for each look, min_rounds..max_rounds: Pocock's boundary for the studentised trimmed mean,
    from CALIBRATION_PATHS seeded standard normal paths (under the null its law is free of the ratio
    and the spread: one law serves every comparison)."""
    return _boundary(rule.alpha, rule.looks, rule.trim)


@cache  # once per process and design: a fraction of a second at 18 rounds, about 5 s at MAX_ROUNDS
def _boundary(alpha: float, looks: range, trim: float) -> tuple[float, ...]:
    import numpy as np

    pivots = np.stack(list(_null_pivots(looks, trim)))  # looks x paths
    # Each look's one-sided p-value, from its rank among the paths at that look; the nominal level is
    # the one a path's smallest p-value over all the looks falls below with chance alpha.
    ranks = pivots.argsort(axis=1).argsort(axis=1)
    smallest = (1.0 - ranks / CALIBRATION_PATHS).min(axis=0)
    nominal = float(np.quantile(smallest, alpha))
    return tuple(float(c) for c in np.quantile(pivots, 1 - nominal, axis=1))


def _null_pivots(looks: range, trim: float) -> Iterator[np.ndarray]:
    """The studentised trimmed mean at each look of each path (the true mean 0)."""
    import numpy as np

    paths = np.random.default_rng(CALIBRATION_SEED).standard_normal((CALIBRATION_PATHS, looks[-1]))
    for rounds in looks:
        centre, error = _trimmed_rows(np.sort(paths[:, :rounds], axis=1), trimmed_count(rounds, trim))
        yield centre / error
