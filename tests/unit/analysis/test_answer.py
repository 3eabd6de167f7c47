"""The answer from constructed records: which mode to train in, and whether accuracy survives.

FIXTURES: every record here is made up to exercise the rule (hosts named "fixture-..."), not a
measurement.
"""

from __future__ import annotations

from support.fixture_records import A100, CPU, MLP, records, three

from amp_suite.records.results import EvalPoint
from amp_suite.report import build_report


def answer_of(machine, results):
    report = build_report(records(machine, MLP, results), [])
    (answer,) = report.answer
    return answer


def test_the_fastest_mode_that_keeps_accuracy_is_recommended_with_its_interval_and_seeds():
    bf16 = [(1850.0, 0.9), (1900.0, 0.9), (1950.0, 0.9)]
    answer = answer_of(A100, {"fp32": three(1000.0), "fp16": three(1500.0), "bf16": bf16})
    assert (answer.mode, answer.accuracy, answer.seeds, answer.parity) == ("bf16", "kept", 3, "pass")
    low, high = answer.speedup_interval
    assert low < 1.9 < high and answer.sentence.startswith(f"bf16: 1.90x [{low:.2f}, {high:.2f}] faster, 1.00x memory")
    assert answer.sentence.endswith("accuracy kept (t-test p=0.002, 3 seeds)")
    assert answer.rule == "bf16" and answer.rule_disagrees is None  # an A100: the rule says bf16 too


def test_a_faster_mode_that_loses_accuracy_is_passed_over_and_named():
    answer = answer_of(A100, {"fp32": three(1000.0), "fp16": three(1500.0), "bf16": three(1900.0, accuracy=0.8)})
    assert (answer.mode, answer.accuracy) == ("fp16", "kept")
    assert "; bf16 is 1.90x faster but loses accuracy: -0.1 against a margin of" in answer.sentence
    assert "the capability rule recommends bf16" in answer.rule_disagrees
    assert "1.90x" not in answer.rule_note  # the sentence gives bf16's speed: the note does not repeat it


def test_one_seed_beyond_its_tolerance_is_at_risk_never_kept():
    answer = answer_of(CPU, {"fp32": [(1000.0, 0.881)], "bf16": [(1300.0, 0.819)]})
    assert (answer.mode, answer.accuracy, answer.parity) == ("fp32", "at risk", None)
    assert answer.sentence == (
        "stay with fp32: bf16 is 1.30x faster but accuracy is at risk: -0.062 against a margin of 0.0176,"
        " one seed; run more seeds"
    )
    assert "accuracy kept" not in answer.sentence


def test_no_worthwhile_gain_is_a_conclusive_fp32_and_the_rule_is_reconciled_with_the_measurement():
    answer = answer_of(CPU, {"fp32": [(1000.0, 0.9)], "bf16": [(1010.0, 0.9)], "fp16": [(300.0, 0.9)]})
    assert (answer.verdict, answer.mode, answer.accuracy) == ("stay", "fp32", "kept")
    low, high = next(r for r in build_report(records(CPU, MLP, {"fp32": [(1000.0, 0.9)], "bf16": [(1010.0, 0.9)]}),
                                             []).rows if r.precision == "bf16").speedup.interval  # fmt: skip
    assert 1 < low < high < 1.05  # faster beyond noise, but by less than is worth a change of precision
    assert answer.sentence.startswith(
        f"no mode beats fp32 by 5% or more here: the fastest, bf16, ran at 1.01x [{low:.2f}, {high:.2f}] fp32's speed"
    )
    assert answer.rule_holds is False and answer.rule_disagrees == (
        "the capability rule recommends bf16 (this CPU has native bf16 instructions);"
        f" measured, bf16 ran at 1.01x [{low:.2f}, {high:.2f}] fp32's speed"
    )
    # Beside the answer, whose sentence gives bf16's speed already, the note does not say it again.
    assert answer.rule_note == (
        "the capability rule recommends bf16 (this CPU has native bf16 instructions),"
        " which the measurement above does not bear out"
    )
    assert answer.sentence.count("1.01x") == 1


def test_an_interval_across_1_that_could_hold_a_gain_is_inconclusive_and_says_what_to_rerun():
    # Windows that vary by 9% (below NOISY_SPREAD: the machine held still), one seed: 1.03x [0.98, 1.08].
    made = records(CPU, MLP, {"fp32": [(1000.0, 0.9)], "bf16": [(1030.0, 0.9)]},
                   windows=(0.955, 1.045, 1.0, 0.96, 1.04, 1.0))  # fmt: skip
    (answer,) = build_report(made, []).answer
    assert (answer.verdict, answer.mode, answer.speedup_interval) == ("inconclusive", None, None)
    assert answer.sentence.startswith("inconclusive: bf16 ran at 1.03x [0.98, 1.0")
    assert answer.sentence.endswith("fp32's speed: within this run's noise. Rerun with repeats: 3")
    assert answer.rule_holds is None and answer.rule_disagrees is None  # nothing to hold the rule to


def test_a_noisy_cell_carries_no_recommendation_and_the_answer_says_how_the_machine_moved():
    # bf16 looks 2x faster, but fp32's windows ran anywhere from 500 to 1,000 samples/s: a busy machine.
    fp32 = records(CPU, MLP, {"fp32": [(750.0, 0.9)]}, windows=(0.67, 1.33, 0.7, 1.3, 0.68, 1.32))
    bf16 = records(CPU, MLP, {"bf16": [(1500.0, 0.9)]})
    fp32 = [r.updated(noisy=True) for r in fp32]
    (answer,) = build_report(fp32 + bf16, []).answer
    assert (answer.verdict, answer.mode) == ("inconclusive", None)
    assert answer.sentence == (
        "inconclusive: fp32 ran between 503 and 998 samples/s: the machine changed under the run."
        " Rerun on a quiet machine, or with repeats: 3"
    )


def test_a_host_bound_cells_spread_is_its_hosts_jitter_and_the_answer_names_the_bound_instead():
    """The busy machine above, on a GPU whose every step the host set (the GPU idle 80% of it): the same
    spread is the host's jitter, not a machine that moved. The answer decides on the interval, names the
    bound with each mode's figures and the GPU work saved, and what would change it."""
    fp32 = records(A100, MLP, {"fp32": [(750.0, 0.9)]}, windows=(0.67, 1.33, 0.7, 1.3, 0.68, 1.32), idle=0.8)
    bf16 = records(A100, MLP, {"bf16": [(1500.0, 0.9)]}, idle=0.8)
    (answer,) = build_report([r.updated(noisy=True) for r in fp32] + bf16, []).answer
    assert "machine changed" not in answer.sentence and "quiet machine" not in answer.sentence
    assert "bf16 host-bound: kernel launches, not the GPU, set the pace (fp32 host-bound (GPU busy" in answer.sentence
    assert "What would change it: CUDA graphs (compile: reduce-overhead)" in answer.sentence
    assert "The GPU's own work per step, cut against fp32's: bf16 " in answer.sentence
    # Unclear on a host-bound pair: more of the same host decides nothing, and the answer says so.
    close = records(A100, MLP, {"fp32": [(1000.0, 0.9)], "bf16": [(1030.0, 0.9)]}, idle=0.8,
                    windows=(0.9, 1.1, 0.92, 1.08, 0.95, 1.05))  # fmt: skip
    (answer,) = build_report(close, []).answer
    assert answer.verdict == "inconclusive" and "More repeats measure the host again" in answer.sentence
    assert "Rerun" not in answer.sentence


def test_a_host_bound_answer_cites_its_arms_that_measured_the_remedies():
    """The same MLP eager (host-bound) and fused under CUDA graphs (the GPU's pace): the eager answer
    says what the remedy arm measured; the arm's own answer, not host-bound, cites nothing."""
    eager = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1020.0)}, idle=0.8)
    graphs = {**MLP, "label": "mlp-graphs", "fused_optimizer": True, "compile": ["reduce-overhead"]}
    remedied = records(A100, graphs, {"fp32": three(1500.0), "bf16": three(3000.0)})
    found = {a.workload: a for a in build_report(eager + remedied, []).answer}
    assert found["mlp"].host_bound and not found["mlp-graphs"].host_bound
    assert "Measured here beside it: mlp-graphs (compiled (reduce-overhead)): bf16 at 2.00x [" in found["mlp"].sentence
    assert "Measured here beside it" not in found["mlp-graphs"].sentence


def test_a_slower_mode_side_by_side_is_a_conclusive_fp32_however_the_machine_moved():
    """Side by side, the windows of a pair share the machine's state: their interval has the move in it."""
    made = records(CPU, MLP, {"fp32": [(1000.0, 0.9)], "bf16": [(600.0, 0.9)]}, windows=(0.5, 1.5, 0.6, 1.4, 1, 1))
    made = [r.updated(noisy=True, side_by_side_id="pair", turn_order=["a", "b"]) for r in made]
    (answer,) = build_report(made, []).answer
    assert (answer.verdict, answer.mode) == ("stay", "fp32")
    assert answer.sentence.startswith("no mode beats fp32 by 5% or more here: the fastest, bf16, ran at 0.60x [0.60,")
    apart = [r.updated(side_by_side_id=None, turn_order=[]) for r in made]  # one after another: can't tell
    (answer,) = build_report(apart, []).answer
    assert answer.verdict == "inconclusive" and "the machine changed under the run" in answer.sentence


def test_of_modes_measured_alike_the_rule_s_pick_is_recommended_whichever_came_out_ahead():
    for fp16 in (1010.0, 1030.0):  # 1% or 3% ahead of bf16: noise on another day
        answer = answer_of(A100, {"fp32": three(400.0), "fp16": three(fp16), "bf16": three(1000.0)})
        assert (answer.verdict, answer.mode, answer.rule_holds) == ("recommended", "bf16", True)
    answer = answer_of(A100, {"fp32": three(400.0), "fp16": three(1200.0), "bf16": three(1000.0)})
    assert (answer.mode, answer.rule_holds) == ("fp16", False)  # 20% ahead: no tie


def test_a_negative_control_is_never_recommended():
    answer = answer_of(A100, {"fp32": three(1000.0), "bf16": three(1500.0), "fp16-noscale": three(3000.0)})
    assert answer.mode == "bf16" and "fp16-noscale" not in answer.sentence
    alone = answer_of(A100, {"fp32": three(1000.0), "fp16-noscale": three(3000.0)})
    assert alone.mode is None and alone.sentence == "no answer: no mode but fp32 finished"


def test_no_fp32_no_answer():
    answer = answer_of(A100, {"bf16": three(1900.0)})
    assert answer.mode is None and answer.sentence == "no answer: fp32 was not run, and every mode is compared with it"


def test_a_one_seed_delta_beyond_its_tolerance_is_marked_at_risk_on_every_surface():
    from rich.console import Console

    from amp_suite.analysis.summary import summarize
    from amp_suite.cli.display import print_summary
    from amp_suite.report.render import to_html, to_markdown

    made = records(CPU, MLP, {"fp32": [(1000.0, 0.881)], "bf16": [(1300.0, 0.819)]})
    report = build_report(made, [])
    assert "| at risk: indicative (-0.062 / 0.0176) |" in to_markdown(report, [])
    assert '<td class="at-risk">at risk: indicative (-0.062 / 0.0176)</td>' in to_html(report, [])
    console = Console(record=True, width=200)
    print_summary(console, summarize(made), "fixture", None)
    assert "at risk: indicative -0.062 / 0.0176" in console.export_text()
    assert "1 of 1 comparisons with fp32 rest on one seed" in to_markdown(report, [])  # said up front


def test_time_to_target_stands_beside_the_speedup_and_the_answer_says_where_they_disagree():
    """bf16's steps are 1.9x faster, but it needs twice fp32's training time to reach 0.9."""
    made = records(A100, {**MLP, "target": {"value": 0.9}}, {"fp32": three(1000.0), "bf16": three(1900.0)})
    curves = {"fp32": [(20, 2.0, 0.95)], "bf16": [(20, 1.0, 0.5), (40, 4.0, 0.95)]}
    made = [r.updated(eval_curve=[EvalPoint(step=s, train_s=t + r.seed / 10, metric=m) for s, t, m in
                                  curves[r.precision]]) for r in made]  # fmt: skip
    (answer,) = build_report(made, []).answer
    assert answer.mode == "bf16" and answer.accuracy == "kept"
    assert "; bf16 reaches val_accuracy 0.9 in 1.95x fp32's time (speedup to target 0.51x [" in answer.sentence
    assert answer.sentence.endswith(", 3 seeds): faster steps, but no sooner to the target")


def test_a_fail_within_the_margin_is_at_risk_and_says_how_much_worse_it_could_be():
    """bf16's mean is within the margin (0.018), but two noisy seeds can't show it: not lost, at risk."""
    answer = answer_of(A100, {"fp32": [(1000.0, 0.90), (1000.0, 0.90)], "bf16": [(1900.0, 0.88), (1900.0, 0.90)]})
    assert (answer.mode, answer.accuracy) == ("fp32", "at risk")
    shown = "bf16 is 1.90x faster but keeping accuracy is not shown: -0.01 against a margin of 0.018, could be up to"
    assert shown in answer.sentence
    assert answer.sentence.endswith("(t-test p=0.29, 2 seeds); run more seeds")


def test_a_slower_mode_that_loses_accuracy_is_not_called_faster():
    answer = answer_of(A100, {"fp32": three(1000.0), "bf16": three(500.0, accuracy=0.8)})
    assert answer.mode == "fp32" and "bf16 runs at 0.50x fp32's speed but loses accuracy" in answer.sentence
    assert "faster but" not in answer.sentence


NO_AMP_CPU = CPU.model_copy(update={"host": "fixture-cpu-no-amp", "fast_bf16": False, "fast_fp16": False})


def _with_skips(machine, statuses: dict[str, str]) -> list:
    """fp32 measured, and every other precision ended with the status given (reason: the rule's)."""
    from amp_suite.config import Matrix
    from amp_suite.records.results import CellRecord

    spec = {"name": "fixture", "steps": 10, "precisions": ["fp32", *statuses], "workloads": [MLP]}
    cells = {c.precision: c for c in Matrix.model_validate(spec).cells(machine.device_type, force=True)}
    ended = [CellRecord.for_spec(cells[p], status, record_id=f"fixture-{p}-{status}", machine=machine,
                                 reason=f"fixture: {p} {status}") for p, status in statuses.items()]  # fmt: skip
    return records(machine, MLP, {"fp32": [(1000.0, 0.9)]}) + ended


def test_a_cpu_without_amp_units_whose_modes_were_skipped_is_told_to_stay_in_fp32_with_the_rule_s_reason():
    (answer,) = build_report(_with_skips(NO_AMP_CPU, {"bf16": "skipped", "fp16": "skipped"}), []).answer
    assert (answer.verdict, answer.mode, answer.rule, answer.seeds) == ("stay", "fp32", "fp32", 1)
    assert answer.sentence == (
        "stay in fp32: this CPU has neither native bf16 nor fp16: autocast would be emulated (fp16, bf16 skipped);"
        " `amp-suite run --force` measures the emulation anyway"
    )


def test_only_fp32_finished_is_no_answer_where_a_mode_failed_or_the_device_has_amp_units():
    (failed,) = build_report(_with_skips(NO_AMP_CPU, {"bf16": "skipped", "fp16": "failed"}), []).answer
    assert failed.verdict == "no answer" and failed.sentence.startswith("no answer: no mode but fp32 finished")
    (capable,) = build_report(_with_skips(CPU, {"bf16": "skipped"}), []).answer  # the rule says bf16 here
    assert capable.verdict == "no answer" and capable.mode is None


def test_where_fp32_did_not_learn_the_answer_says_speed_only_on_the_sentence_and_the_report_row():
    from amp_suite.report.render import sections

    made = records(CPU, MLP, {"fp32": three(1000.0, accuracy=0.1), "bf16": three(1900.0, accuracy=0.1)})
    made = [r.model_copy(update={"val_metric_chance": 0.1}) for r in made]
    report = build_report(made, [])
    (answer,) = report.answer
    assert (answer.mode, answer.accuracy) == ("bf16", "not judged")
    assert answer.sentence.startswith("speed only: accuracy not judged (fp32 did not learn: ")
    (row,) = sections(report)[0].rows  # The answer: its accuracy column
    assert row[5] == "speed only: accuracy not judged (fp32 did not learn)"


def test_only_tf32_skipped_beside_fp32_is_no_answer_even_where_the_rule_says_fp32():
    (answer,) = build_report(_with_skips(NO_AMP_CPU, {"tf32": "skipped"}), []).answer  # no AMP mode was in question
    assert answer.verdict == "no answer" and answer.sentence == "no answer: no mode but fp32 finished (tf32 skipped)"
