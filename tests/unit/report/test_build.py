"""The report from constructed records: machines, reference matching and claim verdicts.

FIXTURES: every GPU record here is made up to exercise the logic (its host is named
"fixture-..."), not a measurement; none of it ships as a result.
"""

from __future__ import annotations

import math
import re
import statistics

import pytest
from scipy import stats
from support.fixture_records import A100, CPU, FIXTURE_IDS, MLP, STEADY, V100, records, rn50, three

from amp_suite.config import Matrix
from amp_suite.records.results import CellRecord
from amp_suite.report import build_report, load_references
from amp_suite.report.references import Reference


def reference(**overrides) -> Reference:
    data = {
        "id": "fixture-ref", "gpu": "A100-SXM4-80GB", "model": "resnet50", "precision": "amp",
        "metric": "throughput", "unit": "images/s", "value": 2470,
        "config": {"workload": "resnet", "arch": "resnet50", "image_size": 224, "num_classes": 1000,
                   "channels_last": True, "batch_size": 256, "data": "real"},
        "source": {"document": "fixture", "table": "fixture", "date": "2026-01-01", "url": "https://example.invalid"},
    }  # fmt: skip
    return Reference.model_validate({**data, **overrides})


def a100_resnet(fp16: float = 2400.0, tf32_nchw: float = 950.0) -> list:
    return records(A100, rn50(True), {"fp32": three(400.0), "fp16": three(fp16)}) + records(
        A100, rn50(False), {"fp32": three(380.0), "tf32": three(tf32_nchw)}
    )


def verdicts(report, reference_id="fixture-ref"):
    return [(r.verdict, r.machine) for r in report.references if r.id == reference_id]


# -- machines --------------------------------------------------------------------------------


def test_two_machines_stay_two_columns_and_hosts_of_one_machine_pool():
    second_host = A100.model_copy(update={"host": "fixture-a100-b"})
    report = build_report(
        records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1100.0)})
        + records(second_host, MLP, {"fp32": three(1000.0), "bf16": three(1100.0)})
        + records(V100, MLP, {"fp32": three(500.0), "fp16": three(600.0)}),
        [],
    )
    assert len(report.machines) == 2
    a100 = next(m for m in report.machines if m.device_name.endswith("A100-SXM4-80GB"))
    assert a100.hosts == ["fixture-a100", "fixture-a100-b"] and a100.records == 12
    rows = {(r.machine, r.precision): r for r in report.rows}
    assert len(rows) == len(report.rows) == 4  # never one merged row per precision
    assert rows[(a100.id, "bf16")].hosts == 2 and rows[(a100.id, "bf16")].speedup.value == pytest.approx(1.1)


def test_a_different_software_stack_is_a_different_machine():
    newer = A100.model_copy(update={"driver": "560.1"})
    report = build_report(
        records(A100, MLP, {"fp32": three(1000.0)}) + records(newer, MLP, {"fp32": three(1200.0)}), []
    )
    assert len(report.machines) == 2 and {r.throughput for r in report.rows} == {1000.0, 1200.0}


def test_differently_configured_workloads_of_one_name_are_never_pooled():
    wide = {**MLP, "hidden": 64}
    report = build_report(records(CPU, MLP, {"fp32": three(1000.0)}) + records(CPU, wide, {"fp32": three(10.0)}), [])
    assert sorted(r.throughput for r in report.rows) == [10.0, 1000.0]


def test_speedups_have_an_interval_with_repeats_and_natural_units():
    report = build_report(a100_resnet(), [], baseline="tf32")
    fp16 = next(r for r in report.rows if r.precision == "fp16")
    assert fp16.unit == "images/s" and fp16.speedups["fp32"].value == pytest.approx(6.0)
    assert "tf32" not in fp16.speedups  # its setup (channels_last) ran no tf32: no baseline, no ratio
    tf32 = next(r for r in report.rows if r.precision == "tf32")
    assert tf32.speedups["tf32"].value == pytest.approx(1.0) and tf32.speedups["tf32"].interval is None
    assert tf32.speedups["fp32"].value == pytest.approx(950 / 380) and tf32.speedups["fp32"].seeds == 3

    noisy = {"fp32": [(1000.0, 0.9), (1100.0, 0.9), (900.0, 0.9)], "bf16": [(1500.0, 0.9)] * 2 + [(1600.0, 0.9)]}
    (bf16,) = [r for r in build_report(records(A100, MLP, noisy), []).rows if r.precision == "bf16"]
    # By hand (analysis.speedup): the seeds' log ratios, and each seed's error from its windows (one
    # after another: Welch over both cells' six STEADY windows), over three seeds, on the log scale.
    between = statistics.variance([math.log(1500 / 1000), math.log(1500 / 1100), math.log(1600 / 900)]) / 3
    within = 2 * statistics.variance([math.log(f) for f in STEADY]) / 6 / 3
    degrees = (between + within) ** 2 / (between**2 / 2 + within**2 / 30)
    half = stats.t.ppf(0.975, degrees) * math.sqrt(between + within)
    speedup = 4600 / 3000  # the ratio of the mean throughputs
    assert bf16.speedup.value == pytest.approx(speedup) and bf16.speedup.baseline == "fp32"
    assert bf16.speedup.interval == pytest.approx((speedup * math.exp(-half), speedup * math.exp(half)), rel=1e-9)
    single = build_report(records(A100, MLP, {"fp32": [(1000.0, 0.9)], "bf16": [(1500.0, 0.9)]}), []).rows
    (low, high) = next(r.speedup.interval for r in single if r.precision == "bf16")  # one seed: from its windows
    half = stats.t.ppf(0.975, 10) * math.sqrt(2 * statistics.variance([math.log(f) for f in STEADY]) / 6)
    assert (low, high) == pytest.approx((1.5 * math.exp(-half), 1.5 * math.exp(half)), rel=1e-6)


# -- references ------------------------------------------------------------------------------


def test_a_throughput_within_tolerance_is_reproduced():
    report = build_report(a100_resnet(fp16=2400.0), [reference()])
    (result,) = report.references
    assert result.verdict == "reproduced" and result.measured == pytest.approx(2400.0)
    assert result.ratio == pytest.approx(2400 / 2470) and result.machine == report.machines[0].id


def test_a_throughput_outside_tolerance_is_not_reproduced():
    (result,) = build_report(a100_resnet(fp16=1500.0), [reference()]).references
    assert result.verdict == "not reproduced" and result.ratio == pytest.approx(1500 / 2470)


def test_a_speedup_pairs_the_two_configurations_the_publication_compared():
    published = reference(metric="speedup", unit="x", value=2.63, baseline="tf32",
                          baseline_config={"channels_last": False})  # fmt: skip
    (result,) = build_report(a100_resnet(fp16=2400.0, tf32_nchw=950.0), [published]).references
    assert result.measured == pytest.approx(2400 / 950) and result.verdict == "reproduced"


def test_no_matching_run_says_why():
    other_gpu = build_report(records(V100, rn50(True), {"fp16": three(1200.0)}), [reference()]).references
    assert [(r.verdict, r.machine) for r in other_gpu] == [("no matching run", None)]
    assert "no run on A100-SXM4-80GB" in other_gpu[0].why
    other_batch = build_report(records(A100, rn50(True, batch=128), {"fp16": three(2400.0)}), [reference()])
    assert other_batch.references[0].verdict == "no matching run" and "batch_size 256" in other_batch.references[0].why
    full_training = reference(metric="top1_accuracy", unit="%", value=77.1, needs="a 90-epoch run")
    (result,) = build_report(a100_resnet(), [full_training]).references
    assert result.verdict == "no matching run" and "90-epoch" in result.why


def test_never_across_gpu_models_even_of_one_family():
    pcie = A100.model_copy(update={"device_name": "NVIDIA A100-PCIE-40GB"})
    (result,) = build_report(records(pcie, rn50(True), {"fp16": three(2470.0)}), [reference()]).references
    assert result.verdict == "no matching run"


def test_the_shipped_references_are_sourced_and_cover_the_issue():
    shipped = load_references(None)
    ids = {r.id for r in shipped}
    assert {"dle-resnet50-a100-80gb-tf32-throughput", "dle-resnet50-a100-80gb-amp-throughput",
            "dle-resnet50-v100-16gb-fp32-throughput", "dle-resnet50-v100-16gb-amp-throughput"} <= ids  # fmt: skip
    assert any(r.metric == "top1_accuracy" and r.needs for r in shipped)
    # Every figure names a workload the suite has (the Transformer-XL entries named none and never
    # matched), torchao's float8 single linear among them (a kernel benchmark, measured as published).
    assert {r.config["workload"] for r in shipped} == {"resnet", "bert", "t5", "torchao-float8-linear"}
    assert {"dle-bert-large-a100-80gb-seq128-amp-throughput", "hf15026-t5-base-a100-40gb-bf16-throughput"} <= ids
    float8 = [r for r in shipped if r.config["workload"] == "torchao-float8-linear"]
    vendor = [r for r in shipped if not r.community and r not in float8]
    assert all(r.source.url.startswith("https://github.com/NVIDIA/DeepLearningExamples/blob/") for r in vendor)
    assert {r.value for r in float8} == {0.80, 1.39} and not any(r.needs for r in float8)  # a matrix runs them
    assert all(r.source.url.startswith("https://github.com/pytorch/ao/blob/0cf1281a38bd") for r in float8)
    community = [r for r in shipped if r.community]
    assert community and all("huggingface/transformers/issues/15026" in r.source.url for r in community)


TRANSFORMER_GPUS = {  # the GPU models the transformer figures were measured on
    "A100-SXM4-80GB": A100,
    "A100-SXM4-40GB": A100.model_copy(update={"device_name": "NVIDIA A100-SXM4-40GB", "host": "fixture-a100-40"}),
    "V100-SXM2-32GB": V100.model_copy(update={"device_name": "Tesla V100-SXM2-32GB", "host": "fixture-v100-32"}),
}


def test_each_transformer_reference_finds_its_pair_of_cells_in_the_shipped_matrix():
    """Every BERT and t5 figure, on a machine of its GPU model running transformer-references.yaml,
    finds its cell (and a speedup its baseline's, at the baseline's batch size); on other GPU models
    none does, and on a CPU the report says which GPU each needs."""
    from conftest import EXPERIMENTS

    from amp_suite.config import load_matrix

    cells = load_matrix(EXPERIMENTS / "transformer-references.yaml").cells("cuda")
    made = [  # FIXTURE throughputs: only whether each reference finds its pair of runs is checked
        CellRecord.for_spec(cell, "ok", machine=machine, throughput=1000.0 + cell.batch_size,
                            record_id=f"fixture-{next(FIXTURE_IDS)}")  # fmt: skip
        for machine in TRANSFORMER_GPUS.values()
        for cell in cells
    ]
    published = [r for r in load_references(None) if r.config.get("workload") in ("bert", "t5")]
    assert len(published) == 15
    report = build_report(made, published)
    by_id: dict[str, list] = {}
    for result in report.references:
        by_id.setdefault(result.id, []).append(result)
    for reference in published:
        (result,) = by_id[reference.id]  # one machine of each GPU model: one match, or one "no matching run"
        assert result.verdict != "no matching run", (reference.id, result.why)
        assert report.machines[[m.id for m in report.machines].index(result.machine)].device_name.endswith(
            reference.gpu
        )
        if reference.metric == "speedup":  # both sides at their own batch sizes: (1000 + b) / (1000 + b')
            baseline_batch = reference.baseline_config.get("batch_size", reference.config["batch_size"])
            assert result.measured == pytest.approx((1000 + reference.config["batch_size"]) / (1000 + baseline_batch))
    on_cpu = [CellRecord.for_spec(cell, "ok", machine=CPU, throughput=10.0, record_id=f"fixture-{next(FIXTURE_IDS)}")
              for cell in load_matrix(EXPERIMENTS / "transformer-references.yaml").cells("cpu")]  # fmt: skip
    unmatched = build_report(on_cpu, published)
    assert {r.verdict for r in unmatched.references} == {"no matching run"}
    assert {r.why for r in unmatched.references} == {f"no run on {gpu}" for gpu in TRANSFORMER_GPUS}
    from amp_suite.report.render import sections

    (note,) = [n for s in sections(unmatched) if s.title == "Published references" for n in s.notes]
    assert "bert-large on A100-SXM4-80GB, V100-SXM2-32GB" in note
    assert "t5-base on A100-SXM4-40GB (community figures)" in note  # NVIDIA's are not
    assert "V100-SXM2-32GB (" not in note
    every = [n for s in sections(build_report(on_cpu, load_references(None))) if s.title == "Published references"
             for n in s.notes]  # fmt: skip
    assert len(every) == 2 and "ImageNet" in every[1] and "resnet50 on" in every[0]  # 90 epochs: no matrix can
    assert every[1].startswith("4 published figure(s) are out of a short matrix's reach (resnet50: a full 90-epoch")
    assert "torchao float8 single linear (LNLinearSigmoid) on H100 80GB HBM3" in every[0]  # a matrix runs it now


# -- the article's claims --------------------------------------------------------------------


def claim(report, claim_id, machine=None):
    found = [c for c in report.claims if c.claim == claim_id and (machine is None or c.machine == machine)]
    assert len(found) == 1, found
    return found[0]


def test_tensor_core_speedup_is_judged_against_tf32_where_the_gpu_has_it_and_not_on_a_cpu():
    def verdict(machine, results, workload=None):
        report = build_report(records(machine, workload or rn50(True), results), [])
        return claim(report, "tensor_core_speedup")

    within = verdict(A100, {"fp32": three(300.0), "tf32": three(400.0), "bf16": three(800.0)})
    assert within.verdict == "supported" and "over tf32" in within.evidence and "2.00x" in within.evidence
    assert verdict(A100, {"fp32": three(300.0), "tf32": three(400.0), "bf16": three(440.0)}).verdict == "contradicted"
    beyond = verdict(A100, {"fp32": three(100.0), "tf32": three(400.0), "bf16": three(1600.0)})
    assert beyond.verdict == "contradicted" and "4.00x" in beyond.evidence  # more than the claim's 3x
    volta = verdict(V100, {"fp32": three(300.0), "fp16": three(750.0)})  # no TF32: against fp32
    assert volta.verdict == "supported" and "over fp32" in volta.evidence
    cpu = verdict(CPU, {"fp32": three(40.0), "bf16": three(80.0)})
    assert cpu.verdict == "not measured here"
    host = build_report(records(A100, rn50(True), {"fp32": three(300.0), "bf16": three(800.0)}, idle=0.8), [])
    assert claim(host, "tensor_core_speedup").verdict == "not measured here"  # host-bound: the host's speed
    assert "host-bound" in claim(host, "tensor_core_speedup").evidence


def test_a_model_by_name_is_judged_by_the_tensor_core_claim_as_it_says_or_as_it_measures():
    """A model the suite does not ship is matmul-heavy where its config says so, else where at
    least 95% of its step's arithmetic is in matmuls and convolutions; the claim names it."""

    def verdict(share, **stated):
        workload = {"workload": "torchvision", "model": "convnext_tiny", "label": "my-convnext", "batch_sizes": [256],
                    "samples": 512, **stated}  # fmt: skip
        results = {"fp32": three(300.0), "tf32": three(400.0), "bf16": three(800.0)}
        return claim(build_report(records(A100, workload, results, share=share), []), "tensor_core_speedup")

    measured = verdict(0.98)
    assert measured.verdict == "supported" and "my-convnext" in measured.evidence
    elementwise = verdict(0.6)
    assert elementwise.verdict == "not measured here" and "my-convnext" not in elementwise.evidence
    assert verdict(None).verdict == "not measured here"  # records without the share: not judged
    assert verdict(0.98, matmul_heavy=False).verdict == "not measured here"  # the user's word stands
    stated = verdict(0.6, matmul_heavy=True)
    assert stated.verdict == "supported" and "my-convnext" in stated.evidence


def test_launch_bound_models_gain_little():
    """Launch-bound is what the GPU's traced work says (idle most of the step), never the step's length."""
    host_bound = {"idle": 0.8}
    little = build_report(records(A100, MLP, {"fp32": three(100_000.0), "fp16": three(105_000.0)}, **host_bound), [])
    assert claim(little, "launch_bound_little_gain").verdict == "supported"
    lots = build_report(records(A100, MLP, {"fp32": three(100_000.0), "fp16": three(200_000.0)}, **host_bound), [])
    assert claim(lots, "launch_bound_little_gain").verdict == "contradicted"
    gpu_bound = build_report(records(A100, MLP, {"fp32": three(100_000.0), "fp16": three(105_000.0)}), [])
    assert claim(gpu_bound, "launch_bound_little_gain").verdict == "not measured here"  # a 0.64 ms step, the GPU's


def test_bf16_parity_needs_repeats_and_fails_on_a_real_degradation():
    kept = build_report(records(A100, MLP, {"fp32": three(1000.0, 0.9), "bf16": three(1000.0, 0.899)}), [])
    assert claim(kept, "bf16_keeps_parity").verdict == "supported"
    lost = build_report(records(A100, MLP, {"fp32": three(1000.0, 0.9), "bf16": three(1000.0, 0.7)}), [])
    assert claim(lost, "bf16_keeps_parity").verdict == "contradicted"
    one_seed = build_report(records(A100, MLP, {"fp32": [(1000.0, 0.9)], "bf16": [(1000.0, 0.7)]}), [])
    assert claim(one_seed, "bf16_keeps_parity").verdict == "not measured here"  # indicative only


def test_the_capability_rule_leaves_launch_bound_models_alone():
    results = {"fp32": three(100_000.0), "fp16": three(90_000.0), "bf16": three(80_000.0)}  # AMP slower: tiny steps
    report = build_report(records(A100, MLP, results), [])
    assert claim(report, "capability_rule").verdict == "not measured here"


def test_amp_memory_is_judged_on_gpus_only():
    lower = {"fp32": 1000.0, "bf16": 600.0}
    report = build_report(records(CPU, MLP, {"fp32": three(1.0), "bf16": three(1.0)}, memory=lower), [])
    assert claim(report, "amp_lowers_memory").verdict == "not measured here"


def test_fp16_without_a_scaler_losing_small_gradients():
    results = {"fp32": three(1000.0, 0.9), "fp16": three(1000.0, 0.9), "fp16-noscale": three(1000.0, 0.1)}
    lost = build_report(records(V100, MLP, results, underflow=0.8), [])
    assert claim(lost, "fp16_needs_scaler").verdict == "supported"
    assert "80% of gradients" in claim(lost, "fp16_needs_scaler").evidence
    results["fp16-noscale"] = three(1000.0, 0.9)
    kept = build_report(records(V100, MLP, results, underflow=0.8), [])
    assert claim(kept, "fp16_needs_scaler").verdict == "contradicted"
    nothing_small = build_report(records(V100, MLP, results, underflow=0.0), [])
    assert claim(nothing_small, "fp16_needs_scaler").verdict == "not measured here"
    del results["fp16"]
    results["fp16-noscale"] = three(1000.0, 0.1)
    half = build_report(records(V100, MLP, results, underflow=0.8), [])  # nothing shows GradScaler keeps them
    assert claim(half, "fp16_needs_scaler").verdict == "not measured here"


def test_amp_lowers_peak_memory():
    lower = {"fp32": 1000.0, "bf16": 600.0}
    report = build_report(records(A100, MLP, {"fp32": three(1.0), "bf16": three(1.0)}, memory=lower), [])
    assert claim(report, "amp_lowers_memory").verdict == "supported"
    higher = {"fp32": 1000.0, "bf16": 1100.0}
    report = build_report(records(A100, MLP, {"fp32": three(1.0), "bf16": three(1.0)}, memory=higher), [])
    assert claim(report, "amp_lowers_memory").verdict == "contradicted"


def test_the_capability_rule_is_checked_against_the_fastest_mode_that_kept_parity():
    results = {"fp32": three(400.0), "tf32": three(1200.0), "fp16": three(1000.0), "bf16": three(990.0)}
    report = build_report(records(A100, rn50(True), results), [])
    # bf16 within 5% of fp16: measured alike, the rule's pick stands; tf32 is no choice of the rule's.
    assert claim(report, "capability_rule").verdict == "supported"
    results["bf16"] = three(700.0)
    report = build_report(records(A100, rn50(True), results), [])
    assert claim(report, "capability_rule").verdict == "contradicted"
    results["fp16"] = [(2000.0, 0.5), (2000.0, 0.5), (2000.0, 0.5)]  # fastest, but it lost parity
    results["bf16"] = three(990.0)
    report = build_report(records(A100, rn50(True), results), [])
    assert claim(report, "capability_rule").verdict == "supported"


def test_the_capability_rule_claim_prints_the_answer_s_judgement_and_never_disagrees_with_it():
    noisy = (0.6, 1.4, 0.7, 1.3, 1.0, 1.0)  # every window of every cell: a machine that moved
    cases = {
        "supported": {"fp32": three(400.0), "fp16": three(1000.0), "bf16": three(990.0)},
        "contradicted": {"fp32": three(400.0), "fp16": three(1000.0), "bf16": three(600.0)},
        "not measured here": {"fp32": three(400.0), "bf16": three(420.0)},
    }
    for expected, results in cases.items():
        windows = {"windows": noisy} if expected == "not measured here" else {}
        made = records(A100, rn50(True), results, **windows)
        made = [r.updated(noisy=True) for r in made] if windows else made
        report = build_report(made, [])
        (answer,) = report.answer
        found = claim(report, "capability_rule")
        assert found.verdict == expected, (found, answer)
        holds = {None: "not measured here", True: "supported", False: "contradicted"}[answer.rule_holds]
        assert found.verdict == holds  # the claim is the answer's judgement, never its own
        if answer.rule_disagrees:
            assert answer.rule_disagrees in found.evidence
    assert "1 inconclusive" in found.evidence and answer.verdict == "inconclusive"


def test_every_claim_has_a_verdict_for_every_machine():
    report = build_report(
        records(A100, MLP, {"fp32": three(1.0)}) + records(CPU, MLP, {"fp32": three(1.0)}), []
    )
    assert len(report.claims) == 10 * 2
    assert {c.verdict for c in report.claims} <= {"supported", "contradicted", "not measured here"}
    assert claim(report, "pre_volta_little_gain", report.machines[0].id).verdict == "not measured here"


def test_the_nvidia_matrix_runs_the_configuration_every_shipped_resnet_figure_was_measured_with():
    from conftest import EXPERIMENTS

    from amp_suite.config import load_matrix

    cells = load_matrix(EXPERIMENTS / "nvidia-resnet50.yaml").cells("cuda")
    made = [  # FIXTURE throughputs: only whether each reference finds its pair of runs is checked
        CellRecord.for_spec(cell, "ok", machine=machine, throughput=1000.0, record_id=f"fixture-{next(FIXTURE_IDS)}")
        for machine in (A100, V100)
        for cell in cells
    ]
    shipped = [r for r in load_references(None) if r.model == "resnet50" and r.metric != "top1_accuracy"]
    within_reach = [r for r in shipped if r.gpu in ("A100-SXM4-80GB", "V100-SXM2-16GB")]
    results = build_report(made, shipped).references
    assert len(within_reach) == 6
    for result in results:
        matched = result.verdict != "no matching run"
        assert matched == (result.gpu in ("A100-SXM4-80GB", "V100-SXM2-16GB")), (result.id, result.why)


def test_thousands_of_records_report_in_seconds(tmp_path):
    import time

    from amp_suite.report import make_report

    many = []
    for batch in (32, 64, 128, 256):  # FIXTURE: 4 batch sizes x 5 precisions x 50 seeds x 3 machines
        for machine in (A100, V100, CPU):
            modes = ("fp32", "tf32", "fp16", "bf16", "fp16-noscale")
            seeds = {mode: [(1000.0 + seed, 0.9) for seed in range(50)] for mode in modes}
            for record in records(machine, {**MLP, "batch_sizes": [batch], "samples": 512}, seeds):
                many.append(record.model_copy(update={"loss_curve": [1.0] * 100, "loss_scale_curve": [65536.0] * 100}))
    started = time.monotonic()
    report, written = make_report(many, load_references(None), "fp32", ["fixture"], 0, tmp_path, ("html", "md", "json"))
    elapsed = time.monotonic() - started
    assert report.records == len(many) == 3000 and len(report.machines) == 3
    assert elapsed < 30, f"{elapsed:.1f}s"


def test_the_report_command_needs_no_torch(tmp_path):
    import subprocess
    import sys

    from conftest import cli_env

    fixture = tmp_path / "fixture-results.jsonl"
    made = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1500.0)})
    fixture.write_text("".join(record.model_dump_json() + "\n" for record in made))
    without_torch = """
import sys
class NoTorch:  # any `import torch` raises, as on a machine without it
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision", "transformers"):
            raise ImportError(f"{name} is blocked")
sys.meta_path.insert(0, NoTorch())
from amp_suite.cli import main
sys.argv = ["amp-suite", *sys.argv[1:]]
main()
"""
    done = subprocess.run(
        [sys.executable, "-c", without_torch, "report", str(fixture), "--out", str(tmp_path / "out")],
        cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "report.html").is_file() and "1 machine(s): A100-SXM4-80GB (cc 8.0)" in done.stdout


def test_gpu_energy_and_throttling_reach_the_tables():
    from amp_suite.report.render import sections

    made = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1500.0)})
    state = {"fp32": {"energy_j_per_sample": 0.02, "power_w": 310.0}, "bf16": {"energy_j_per_sample": 0.012,
             "power_w": 280.0, "throttled": True, "throttle_reasons": ["sw_thermal_slowdown"]}}  # fmt: skip
    made = [r.model_copy(update=state[r.precision]) for r in made]
    report = build_report(made, [])
    bf16 = next(row for row in report.rows if row.precision == "bf16")
    assert bf16.throttled and bf16.energy_j_per_sample == pytest.approx(0.012) and bf16.power_w == pytest.approx(280)
    (table,) = [s for s in sections(report) if s.title.startswith("Results on")]
    energy = table.headers.index("energy / sample (power)")
    shown = {row[4]: row for row in table.rows}  # by precision
    assert shown["bf16"][energy] == "0.012 J (280 W)" and "throttled" in shown["bf16"][5]
    assert "throttled" not in shown["fp32"][5]


def test_records_written_under_the_older_rule_are_judged_by_it_and_labelled_with_it(tmp_path):
    """results.jsonl lines from before the t test carry {tolerance, k}: read back, they keep the
    noise-floor rule, and the report names it beside their verdict; today's records name the test."""
    import json

    from amp_suite.records.results import ResultsFile
    from amp_suite.report.render import to_markdown

    made = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(1900.0)})
    lines = [json.loads(r.model_dump_json()) | {"parity_rule": {"tolerance": 0.02, "k": 2.0}} for r in made]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    old, unreadable = ResultsFile(tmp_path / "results.jsonl").read()
    assert unreadable == 0 and {r.parity_rule.method for r in old} == {"noise-floor"}
    (row,) = [r for r in build_report(old, []).rows if r.precision == "bf16"]
    assert (row.parity.verdict, row.parity.method, row.parity.p_value) == ("pass", "noise-floor", None)
    assert "pass (+0 / 0.018, noise-floor rule)" in to_markdown(build_report(old, []), [])
    (today,) = [r for r in build_report(made, []).rows if r.precision == "bf16"]
    assert today.parity.method == "t-test" and today.parity.seeds == 3 and today.parity.p_value < 0.05


def test_fp8_is_compared_with_bf16_as_well_as_fp32():
    """The fp8 question is whether it beats the mixed precision it would replace: bf16."""
    from amp_suite.report.render import to_markdown

    h100 = A100.model_copy(update={"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"})
    made = records(h100, MLP, {"fp32": three(1000.0), "bf16": three(2000.0), "fp8-rowwise": three(2400.0)})
    against_bf16 = build_report(made, [], baseline="bf16")
    (fp8,) = [r for r in against_bf16.rows if r.precision == "fp8-rowwise"]
    assert fp8.speedups["bf16"].value == pytest.approx(1.2) and fp8.speedup.value == pytest.approx(2.4)
    assert fp8.speedups["bf16"].interval is not None
    assert "| speedup vs fp32 | vs bf16 |" in to_markdown(build_report(made, []), [])
    (answer,) = build_report(made, []).answer
    assert answer.mode == "fp8-rowwise" and answer.sentence.startswith("fp8-rowwise: 2.40x [")
    assert "(1.20x [" in answer.sentence and "bf16's speed)" in answer.sentence


def test_a_sentence_long_cell_wraps_in_the_html_even_in_the_first_column():
    """A claim's text is the claims table's first column, which otherwise stays on one line."""
    import html as escaping

    from amp_suite.report.render import to_html

    page = to_html(build_report(records(A100, MLP, {"fp32": three(1.0), "bf16": three(1.5)}), []), [])
    assert "td.prose { white-space: normal" in page
    found = re.findall(r'<td(?: class="([^"]*)")?>(.*?)</td>', page)
    cells = [(klass or "", escaping.unescape(text)) for klass, text in found]
    prose = [text for klass, text in cells if "prose" in klass.split()]
    assert any(text.startswith("bf16 needs no loss scaler") for text in prose)  # a claim, the first column
    assert all(len(text) > 60 for text in prose) and len(prose) == sum(len(text) > 60 for _, text in cells)


def test_fp8_mfu_comes_with_a_note_that_two_peak_rates_mix():
    h200 = A100.model_copy(update={"device_name": "NVIDIA H200", "compute_capability": "9.0"})
    made = records(h200, MLP, {"fp32": three(1000.0), "bf16": three(2000.0), "fp8-rowwise": three(2400.0)})
    made = [r.updated(mfu=0.3, peak_tflops=1979.0) if r.precision == "fp8-rowwise" else r for r in made]
    assert any("two peak rates mix" in note for note in build_report(made, []).notes)
    no_fp8 = [r for r in made if r.precision != "fp8-rowwise"]
    assert not any("two peak rates mix" in note for note in build_report(no_fp8, []).notes)


H100 = A100.model_copy(update={"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
                               "host": "fixture-h100"})  # fmt: skip


def float8_benchmark(machine, kernel_ms: dict[str, float]) -> list:
    """FIXTURE records of torchao's float8 benchmark at its small published shape: each mode's
    kernel time per iteration, its windows STEADY around it."""
    workload = {"workload": "torchao-float8-linear", "batch_sizes": [1024], "in_features": 2048, "out_features": 1024}
    spec = {"name": "torchao-float8", "steps": 20, "precisions": list(kernel_ms), "compile": ["default"],
            "workloads": [workload]}  # fmt: skip
    made = []
    for cell in Matrix.model_validate(spec).cells(machine.device_type, force=True):
        rate = 1024 / (kernel_ms[cell.precision] / 1e3)
        made.append(CellRecord.for_spec(
            cell, "ok", record_id=f"fixture-{next(FIXTURE_IDS)}", machine=machine, throughput=rate,
            kernel_ms_per_step=kernel_ms[cell.precision], throughput_windows=[rate * f for f in STEADY],
        ))  # fmt: skip
    return made


def test_a_float8_benchmark_on_the_publishers_gpu_is_judged_beside_predicts_estimate():
    small = [r for r in load_references("torchao-float8") if r.config["batch_size"] == 1024]
    near = build_report(float8_benchmark(H100, {"bf16": 0.100, "fp8-tensorwise": 0.124}), small)
    (result,) = near.references
    assert result.verdict == "reproduced" and result.measured == pytest.approx(0.100 / 0.124)
    assert result.estimated is not None and 0.3 < result.estimated < 3  # predict's roofline, on the publisher's H100
    far = build_report(float8_benchmark(H100, {"bf16": 0.100, "fp8-tensorwise": 0.070}), small)
    assert far.references[0].verdict == "not reproduced"
    (answer,) = far.answer  # kernel time: fp8 against bf16, nothing learned
    assert answer.verdict == "recommended" and answer.mode == "fp8-tensorwise"
    assert "bf16's speed in GPU kernel time" in answer.sentence and answer.accuracy == "not compared"
    (slower,) = near.answer
    assert slower.verdict == "stay" and slower.mode == "bf16"
    from amp_suite.report.render import sections

    (speed,) = [s for s in sections(far) if s.title.startswith("Speed on")]
    assert speed.headers[2:] == ["bf16", "fp8-tensorwise"]  # held against bf16, as published: not dropped as empty
    assert speed.rows[0][3].startswith("1.43x")


def test_a_float8_benchmark_on_a_cpu_is_shown_and_never_judged():
    small = [r for r in load_references("torchao-float8") if r.config["batch_size"] == 1024]
    report = build_report(float8_benchmark(CPU, {"bf16": 10.0, "fp8-tensorwise": 30.0}), small)
    (result,) = report.references
    assert result.verdict == "not judged" and "CPU times" in result.why and result.measured == pytest.approx(1 / 3)
    (answer,) = report.answer
    assert answer.verdict == "no answer" and answer.sentence.startswith("not judged: on a CPU")


@pytest.mark.parametrize("name", ["NVIDIA H200", "NVIDIA H100 PCIe"])
def test_a_float8_benchmark_on_another_gpu_is_shown_beside_the_figure_and_never_judged(name):
    """A lease may get an H200 or another H100 than the publisher's: its figure still reaches the report."""
    small = [r for r in load_references("torchao-float8") if r.config["batch_size"] == 1024]
    other = H100.model_copy(update={"device_name": name, "host": "fixture-other"})
    report = build_report(float8_benchmark(other, {"bf16": 0.100, "fp8-tensorwise": 0.125}), small)
    (result,) = report.references
    assert result.verdict == "not judged" and result.measured == pytest.approx(0.80)  # as published, yet not judged
    assert result.why.startswith(f"measured on {name.removeprefix('NVIDIA ')}, not the publisher's H100 80GB HBM3")
    assert result.machine == report.machines[0].id and result.estimated is not None  # the publisher's GPU's
    both = build_report(float8_benchmark(other, {"bf16": 0.100, "fp8-tensorwise": 0.125})
                        + float8_benchmark(H100, {"bf16": 0.100, "fp8-tensorwise": 0.124}), small)  # fmt: skip
    assert [r.verdict for r in both.references] == ["reproduced"]  # the publisher's GPU, where there is one


def test_a_two_mode_run_has_no_column_that_repeats_its_speedup_upside_down():
    from amp_suite.report.render import to_markdown

    made = records(A100, MLP, {"fp32": three(1000.0), "bf16": three(2000.0)})
    assert "| speedup vs fp32 | memory vs fp32 |" in to_markdown(build_report(made, []), [])


def test_a_figure_whose_every_panel_would_hold_one_bar_is_left_out():
    """fp32 alone finished: its peak memory as a lone bar compares nothing. Its speedup figure has no
    bars at all. With bf16 beside it, both figures are drawn."""
    from amp_suite.report.figures import draw_figures

    alone = records(CPU, MLP, {"fp32": three(1000.0)})
    assert draw_figures(build_report(alone, []), alone) == []  # (these records carry no loss curves)
    both = records(CPU, MLP, {"fp32": three(1000.0), "bf16": three(1500.0)})
    names = [f.name for f in draw_figures(build_report(both, []), both)]
    assert {"speedup.png", "peak_memory.png"} <= set(names)
