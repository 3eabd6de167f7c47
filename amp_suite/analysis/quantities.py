"""The summary's derived quantities as typed values, each deciding its own verdict. No torch here.

A ratio carries its baseline, interval and seeds; a parity its verdict (a Literal: the only words a
surface may compare with) and the rule that reached it; a difference in data says what differed as a
kind, not as text to search. The report serialises them as they are; amp_suite.analysis.words prints
them for every surface.
"""

from __future__ import annotations

from typing import Literal

from pydantic import computed_field
from pydantic.dataclasses import dataclass

# A mode's speed against fp32 (analysis.answer.speed, and the stopping rule's, analysis.sequential).
SpeedVerdict = Literal["faster", "no gain", "unclear"]
FASTER, NO_GAIN, UNCLEAR = "faster", "no gain", "unclear"
# A mode whose interval shows it gains less than this over fp32, if anything, is not worth a change of
# precision: "no gain", a conclusive answer, where [0.98, 1.02] would otherwise straddle 1 forever.
WORTHWHILE_GAIN = 0.05
ParityVerdict = Literal["pass", "fail", "indicative", "invalid", "not judged"]
PASS: ParityVerdict = "pass"  # non-inferiority shown at the margin
FAIL: ParityVerdict = "fail"  # not shown, or not finite
INDICATIVE: ParityVerdict = "indicative"  # one seed: a delta, no test
INVALID: ParityVerdict = "invalid"  # the sides saw different data: judged by nothing
NOT_JUDGED: ParityVerdict = "not judged"  # fp32 itself learned nothing: no accuracy to keep


@dataclass(frozen=True)
class Ratio:
    """A mode's mean over its baseline's, on the seeds both finished (analysis.speedup)."""

    value: float
    baseline: str  # the precision divided by
    interval: tuple[float, float] | None = None  # 95%, with two or more seeds on both sides
    seeds: int = 0  # the seeds both sides finished
    side_by_side: bool = False  # every seed's windows were measured side by side with the baseline's


@dataclass(frozen=True)
class Difference:
    """Why a comparison with fp32 is invalid: a seed saw other data, or other batches in another order."""

    kind: Literal["data", "batch order"]
    seed: int
    words: str  # "seed 0, batch 8: batch order 1a2b... differs from fp32's 3c4d..."


@dataclass(frozen=True)
class Parity:
    delta: float  # AMP mean minus fp32 mean, in the metric's units
    tolerance: float  # the margin: the largest degradation that still passes
    verdict: ParityVerdict
    degradation: float = 0.0  # how much worse than fp32 (the delta, signed so that worse is positive)
    method: str = "t-test"  # the rule that reached the verdict (ParityConfig.method)
    seeds: int = 0  # the seed-paired runs compared
    p_value: float | None = None  # t-test: the chance of so small a degradation were AMP worse by the margin
    upper_bound: float | None = None  # t-test: the degradation's one-sided (1 - alpha) upper confidence bound
    invalid: Difference | None = None  # invalid: what differed
    unlearned: str | None = None  # not judged: what fp32 scored against chance, in words

    @computed_field  # type: ignore[prop-decorator]  # in report.json beside the verdict
    @property
    def lost(self) -> bool:
        """A fail with the mean degradation beyond the margin (or not finite): accuracy lost. A fail
        within it says the seeds could not show AMP within the margin (too few, or too noisy)."""
        return self.verdict == FAIL and not self.degradation <= self.tolerance

    @computed_field  # type: ignore[prop-decorator]
    @property
    def beyond_tolerance(self) -> bool:
        """Worse than the tolerance allows: a fail, or a one-seed ("indicative") delta beyond it."""
        if self.verdict in (INVALID, NOT_JUDGED):  # not compared: nothing is known of it
            return False
        return self.verdict == FAIL or not self.degradation <= self.tolerance  # NaN: beyond
