from __future__ import annotations

import pytest
from conftest import tiny_matrix

from amp_suite.analysis.ratios import ratio_interval
from amp_suite.analysis.summary import parity, summarize
from amp_suite.analysis.words import parity_words, reach_words
from amp_suite.config import Matrix, ParityConfig
from amp_suite.records.results import CellRecord, EvalPoint

CELLS = Matrix.model_validate(tiny_matrix(repeats=2)).cells("cpu")


def _record(precision, seed, status="ok", throughput=None, memory=None, reason=None):
    spec = next(c for c in CELLS if c.precision == precision and c.seed == seed)
    return CellRecord.for_spec(spec, status, reason, throughput=throughput, peak_memory_mb=memory)


def test_speedup_and_memory_ratio_against_fp32_mean_over_seeds():
    records = [
        _record("fp32", 0, throughput=100.0, memory=1000.0),
        _record("fp32", 1, throughput=300.0, memory=1000.0),
        _record("bf16", 0, throughput=350.0, memory=600.0),
        _record("bf16", 1, throughput=450.0, memory=600.0),
    ]
    rows = {row.precision: row for row in summarize(records)}
    assert rows["fp32"].speedup.value == 1.0 and rows["fp32"].runs == 2
    assert rows["bf16"].speedup.value == pytest.approx(2.0) and set(rows["bf16"].speedups) == {"fp32", "bf16"}
    assert rows["bf16"].memory_ratio.value == pytest.approx(0.6)


def test_failed_and_skipped_cells_have_no_ratios_and_keep_their_reason():
    records = [
        _record("fp32", 0, throughput=100.0, memory=10.0),
        _record("tf32", 0, status="skipped", reason="needs 8.0"),
        _record("fp16", 0, throughput=50.0, memory=10.0),
        _record("fp16", 1, status="failed", reason="OOM"),
    ]
    rows = {row.precision: row for row in summarize(records)}
    assert (rows["tf32"].status, rows["tf32"].reason, rows["tf32"].speedup) == ("skipped", "needs 8.0", None)
    assert (rows["fp16"].status, rows["fp16"].runs, rows["fp16"].speedup.value) == ("failed", 1, 0.5)


def test_no_baseline_means_no_ratio():
    rows = summarize([_record("bf16", 0, throughput=10.0, memory=1.0)])
    assert rows[0].speedup is None and rows[0].memory_ratio is None


# The rule older records carry (a tolerance and k, no method): the noise floor, still read by.
RULE = ParityConfig(tolerance=0.02, k=2.0)
TEST = ParityConfig(tolerance=0.02)  # today's rule: the one-sided paired t test at alpha 0.05


def test_an_older_records_rule_is_the_noise_floor_and_judges_as_it_did():
    assert RULE.method == "noise-floor" and TEST.method == "t-test"
    assert parity([0.89, 0.89], [0.90, 0.90], True, RULE).method == "noise-floor"


def test_the_t_test_is_scipys_and_matches_a_hand_computed_case():
    # fp32 at 1.5 on three seeds, AMP 0, 0.01 and 0.02 worse: the margin is 0.02 x 1.5 = 0.03.
    # t = (mean 0.01 - 0.03) / (stdev 0.01 / sqrt 3) = -3.4641. With 2 degrees of freedom, Student's t
    # CDF has a closed form, F(t) = 1/2 + t / (2 sqrt(2 + t^2)): p = 0.5 - 3.4641 / (2 sqrt 14) = 0.037090.
    # The 95% upper bound: 0.01 + t(0.95, 2) 2.919986 x 0.01 / sqrt 3 = 0.026859.
    result = parity([1.5, 1.49, 1.48], [1.5, 1.5, 1.5], True, TEST)
    assert result.p_value == pytest.approx(0.5 - 3.4641016 / (2 * 14**0.5), abs=1e-6)  # 0.037090
    assert result.upper_bound == pytest.approx(0.026859, abs=1e-6) and result.tolerance == pytest.approx(0.03)
    assert (result.verdict, result.seeds, result.method) == ("pass", 3, "t-test")
    # The same differences against a margin of 0.015: t = -0.8660, p = 0.5 - 0.8660 / (2 sqrt 2.75) = 0.2389.
    tighter = parity([1.5, 1.49, 1.48], [1.5, 1.5, 1.5], True, ParityConfig(tolerance=0.01))
    assert tighter.verdict == "fail" and tighter.p_value == pytest.approx(0.5 - 0.8660254 / (2 * 2.75**0.5), abs=1e-6)


def test_the_verdict_depends_on_amps_spread_and_the_number_of_seeds():
    """Same means (AMP 0.89, fp32 0.90, margin 0.018): the old rule passed them all, whatever AMP's
    spread and however few seeds; the t test passes a steady AMP, fails a noisy one on two seeds,
    and passes it again once ten seeds pin its mean down."""
    fp32, steady, noisy = [0.90, 0.90], [0.889, 0.891], [0.88, 0.90]
    assert {parity(amp, fp32, True, RULE).verdict for amp in (steady, noisy)} == {"pass"}
    assert parity(steady, fp32, True, TEST).verdict == "pass"
    two = parity(noisy, fp32, True, TEST)
    assert two.verdict == "fail" and two.p_value > 0.2 and two.upper_bound > two.tolerance > two.degradation
    ten = parity(noisy * 5, fp32 * 5, True, TEST)
    assert ten.verdict == "pass" and ten.p_value < 0.05 and ten.seeds == 10


def test_runs_that_match_fp32_exactly_on_every_seed_pass_without_dividing_by_zero():
    assert parity([0.9, 0.8], [0.9, 0.8], True, TEST).verdict == "pass"
    assert parity([0.85, 0.75], [0.9, 0.8], True, TEST).verdict == "fail"  # 0.05 worse on both: beyond 0.017


def test_parity_with_one_seed_is_only_indicative():
    result = parity([0.89], [0.90], higher_is_better=True, rule=RULE)
    assert result.verdict == "indicative"
    assert result.delta == pytest.approx(-0.01) and result.tolerance == pytest.approx(0.018)


def test_parity_passes_within_the_noise_floor_and_fails_beyond_it():
    fp32 = [0.90, 0.92, 0.88]  # stdev 0.02 -> allowed degradation max(0.018, 2 x 0.02) = 0.04
    assert parity([0.87, 0.88, 0.86], fp32, True, RULE).verdict == "pass"  # 0.03 worse: run-to-run noise
    failed = parity([0.80, 0.81, 0.79], fp32, True, RULE)  # 0.10 worse: a real degradation
    assert failed.verdict == "fail" and failed.tolerance == pytest.approx(0.04)


def test_parity_counts_only_degradation_and_respects_direction():
    assert parity([0.99, 0.99], [0.90, 0.90], True, RULE).verdict == "pass"  # better accuracy
    perplexity = parity([12.0, 12.1], [10.0, 10.1], higher_is_better=False, rule=RULE)
    assert perplexity.verdict == "fail" and perplexity.delta == pytest.approx(2.0)
    assert parity([9.0, 9.1], [10.0, 10.1], higher_is_better=False, rule=RULE).verdict == "pass"


def test_parity_fails_a_nan_metric():
    assert parity([float("nan"), 0.9], [0.9, 0.91], True, RULE).verdict == "fail"
    assert parity([float("nan")], [0.9], True, RULE).verdict == "fail"  # not merely indicative


def test_a_diverged_amp_run_fails_parity_whatever_metric_it_reached():
    records = [
        _record("fp32", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": 0.90}),
        _record("bf16", 0, status="diverged", reason="nan").model_copy(update={"val_metric": 0.90}),
    ]
    row = next(r for r in summarize(records, RULE) if r.precision == "bf16")
    assert row.status == "diverged" and row.parity.verdict == "fail"


def test_summary_pairs_parity_by_seed():
    records = [
        _record("fp32", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": 0.90}),
        _record("fp32", 1, throughput=1.0, memory=1.0).model_copy(update={"val_metric": 0.92}),
        _record("bf16", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": 0.91}),
        _record("bf16", 1, status="failed", reason="boom"),
    ]
    row = next(r for r in summarize(records, RULE) if r.precision == "bf16")
    # seed 1 failed for bf16, so fp32's seed 1 is left out too: one pair -> indicative
    assert row.parity.verdict == "indicative" and row.parity.delta == pytest.approx(0.01)


def test_a_noisy_seed_makes_the_row_noisy_and_a_wide_interval_stays_positive():
    steady = [_record("fp32", 0, throughput=100.0), _record("fp32", 1, throughput=100.0),
              _record("bf16", 0, throughput=150.0), _record("bf16", 1, throughput=151.0)]  # fmt: skip
    assert not any(row.noisy for row in summarize(steady))
    wide = steady[:2] + [_record("bf16", 0, throughput=100.0), _record("bf16", 1, throughput=200.0)]
    rows = {row.precision: row for row in summarize(wide)}
    low, high = rows["bf16"].speedup.interval  # 1.5x from two seeds at 1x and 2x: t with one degree of freedom
    assert 0 < low < 1 < 1.5 < high and low * high == pytest.approx(1.5**2)  # symmetric on the log scale
    flagged = steady[:3] + [steady[3].model_copy(update={"noisy": True})]
    assert {row.precision: row.noisy for row in summarize(flagged)} == {"fp32": False, "bf16": True}


def _target_record(precision, seed, curve, status="ok", target=None):
    """FIXTURE: a record of a workload whose target is 95% of fp32's final accuracy (or `target`)."""
    matrix = tiny_matrix(repeats=3, precisions=["fp32", "bf16", "fp16", "fp16-noscale"])
    matrix["workloads"][0]["target"] = {"value": target} if target else {"of_fp32": 0.95}
    spec = next(c for c in Matrix.model_validate(matrix).cells("cpu") if c.precision == precision and c.seed == seed)
    points = [EvalPoint(step=step, train_s=seconds, metric=metric) for step, seconds, metric in curve]
    return CellRecord.for_spec(
        spec, status, throughput=100.0, val_metric=points[-1].metric, val_metric_name="val_accuracy",
        val_higher_is_better=True, eval_curve=points, data_fingerprint="d", batch_order_hash=f"order{seed}",
    )  # fmt: skip


def test_time_to_a_derived_target_pairs_seeds_and_counts_the_seeds_short_of_it():
    fp32 = [_target_record("fp32", s, [(10, 1.0, 0.5), (20, 2.0, 0.96), (30, 3.0, 1.0)]) for s in range(3)]
    bf16 = [_target_record("bf16", s, [(10, 0.5 + s / 10, 0.96), (20, 1.0, 0.97), (30, 1.5, 0.98)]) for s in range(3)]
    noscale = [_target_record("fp16-noscale", s, [(10, 1.0, 0.1), (20, 2.0, 0.1), (30, 3.0, 0.1)]) for s in range(3)]
    fp16 = [_target_record("fp16", 0, [(10, 1.0, 0.9), (20, 2.0, 0.96), (30, 3.0, 0.99)]),
            _target_record("fp16", 1, [(10, 1.0, 0.9), (20, 2.0, 0.9), (30, 3.0, 0.9)]),
            _target_record("fp16", 2, [(10, 1.0, 0.9)], status="diverged")]  # fmt: skip
    rows = {r.precision: r.time_to_target for r in summarize(fp32 + bf16 + noscale + fp16, TEST)}
    assert rows["fp32"].target == pytest.approx(0.95) and rows["fp32"].speedup == 1.0  # 95% of fp32's 1.0
    assert rows["fp32"].speedup_interval is None and rows["fp32"].steps == 20
    bf16_row = rows["bf16"]  # 0.5, 0.6, 0.7 s against fp32's 2 s on every seed: 2 / 0.6
    assert bf16_row.speedup == pytest.approx(2 / 0.6) and bf16_row.steps == 10 and bf16_row.all_reached
    low, high = bf16_row.speedup_interval
    assert low < 2 / 0.6 < high
    assert "in 0.30x fp32's time" in reach_words(bf16_row, "bf16")
    assert rows["fp16-noscale"].reached == 0 and rows["fp16-noscale"].speedup is None
    never = "fp16-noscale never reaches 95% of fp32's val_accuracy (0.95) (3 seeds)"
    assert reach_words(rows["fp16-noscale"], "fp16-noscale") == never
    # One seed reached it, one ended short of it, one diverged: 1 of 3, its time paired with fp32's seed 0.
    assert (rows["fp16"].reached, rows["fp16"].seeds, rows["fp16"].speedup) == (1, 3, 1.0)


def test_a_comparison_whose_seeds_saw_other_batches_is_invalid_and_never_judged():
    fp32 = [_target_record("fp32", s, [(10, 1.0, 0.96)], target=0.9) for s in range(2)]
    bf16 = [_target_record("bf16", s, [(10, 1.0, 0.96)], target=0.9) for s in range(2)]
    bf16[1] = bf16[1].updated(batch_order_hash="shuffled")
    row = next(r for r in summarize(fp32 + bf16, TEST) if r.precision == "bf16")
    assert row.parity.verdict == "invalid" and row.time_to_target is None
    assert (row.parity.invalid.kind, row.parity.invalid.seed) == ("batch order", 1)
    assert row.parity.invalid.words == "seed 1, batch 8: batch order shuffled differs from fp32's order1"
    # batch_sizes auto: each precision cuts the data into the batches it fits, so only the data must match.
    larger = [r.updated(batch_size=16, batch_order_hash="cut-in-16s") for r in bf16]
    assert next(r for r in summarize(fp32 + larger, TEST) if r.precision == "bf16").parity.invalid is None
    other_data = [r.updated(data_fingerprint="other") for r in bf16[:1]]
    row = next(r for r in summarize(fp32 + other_data, TEST) if r.precision == "bf16")
    assert row.parity.invalid.kind == "data" and row.parity.invalid.words == "seed 0: data other differs from fp32's d"


def test_a_target_fp32_misses_too_is_out_of_reach_not_held_against_the_mode():
    fp32 = [_target_record("fp32", s, [(10, 1.0, 0.5)], target=0.9) for s in range(2)]
    bf16 = [_target_record("bf16", s, [(10, 1.0, 0.5)], target=0.9) for s in range(2)]
    row = next(r for r in summarize(fp32 + bf16, TEST) if r.precision == "bf16")
    assert (row.time_to_target.reached, row.time_to_target.short_of_fp32) == (0, 0)
    assert reach_words(row.time_to_target, "bf16").endswith("; nor does fp32, on those seeds")


def test_an_invalid_comparison_carries_no_test_result_and_an_interval_is_never_clipped():
    fp32 = [_target_record("fp32", s, [(10, 1.0, 0.96)], target=0.9) for s in range(2)]
    bf16 = [_target_record("bf16", s, [(10, 1.0, 0.96)], target=0.9).updated(batch_order_hash="x") for s in range(2)]
    parity = next(r for r in summarize(fp32 + bf16, TEST) if r.precision == "bf16").parity
    assert parity.verdict == "invalid" and parity.p_value is None and parity.upper_bound is None
    low, high = ratio_interval({0: 1.0, 1: 100.0}, {0: 50.0, 1: 1.0})  # wildly noisy seeds
    assert 0.0 < low < 1e-9 and high > 1e9  # "anything", said on the log scale: above 0, not cut at 0
    assert low * high == pytest.approx((50.5 / 25.5) ** 2)  # symmetric around the ratio of the means


@pytest.mark.parametrize(
    ("fp32_metric", "judged"),
    [(0.020, False), (0.029, False), (0.90, True)],  # at chance, within 10% of it, well above it
)
def test_parity_is_not_judged_where_fp32_itself_scored_no_better_than_chance(fp32_metric, judged):
    """BERT at an mlm accuracy of 0.020, where always guessing the commonest token scores 0.027: bf16
    matching fp32 there says nothing of accuracy."""
    chance = {"val_metric_chance": 0.027, "val_metric_name": "val_mlm_accuracy", "val_higher_is_better": True}
    records = [
        _record("fp32", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": fp32_metric, **chance}),
        _record("bf16", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": fp32_metric, **chance}),
    ]
    row = next(r for r in summarize(records, RULE) if r.precision == "bf16")
    if judged:
        assert row.parity.verdict == "indicative" and row.parity.unlearned is None
    else:
        assert row.parity.verdict == "not judged" and not row.parity.beyond_tolerance
        assert f"fp32 did not learn: acc {fp32_metric:.3g}" in row.parity.unlearned  # the mlp config's label
        assert "0.027" in parity_words(row.parity)


def test_a_perplexity_no_lower_than_the_unigram_ones_is_not_judged_either():
    unigram = {"val_metric_chance": 420.0, "val_metric_name": "val_perplexity", "val_higher_is_better": False}
    for fp32_ppl, verdict in ((400.0, "not judged"), (40.0, "indicative")):
        records = [
            _record("fp32", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": fp32_ppl, **unigram}),
            _record("bf16", 0, throughput=1.0, memory=1.0).model_copy(update={"val_metric": fp32_ppl, **unigram}),
        ]
        assert next(r for r in summarize(records, RULE) if r.precision == "bf16").parity.verdict == verdict
