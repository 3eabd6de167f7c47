from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from conftest import EXPERIMENTS, tiny_matrix
from pydantic import ValidationError

from amp_suite.config import PRECISIONS, ConfigError, Matrix, ParityConfig, load_matrix
from amp_suite.config.workloads import REFERENCE_WORKLOADS


def test_shipped_matrices_load():
    default, smoke = load_matrix(EXPERIMENTS / "default.yaml"), load_matrix(EXPERIMENTS / "smoke.yaml")
    assert {w.workload for w in default.workloads} == {"resnet", "transformer", "mlp"}
    assert tuple(default.precisions) == PRECISIONS[:4]  # fp16-noscale is for failure-modes.yaml only
    assert {w.workload for w in smoke.workloads} == set(REFERENCE_WORKLOADS)  # every one of ours, at toy size
    assert set(smoke.precisions) == set(PRECISIONS) - {"fp16-noscale"}  # fp8 too: skipped with its reason on a CPU


def test_failure_modes_matrix_pits_scaled_against_unscaled_fp16():
    matrix = load_matrix(EXPERIMENTS / "failure-modes.yaml")
    assert matrix.precisions == ["fp32", "bf16", "fp16", "fp16-noscale"] and matrix.repeats >= 2
    assert all(cell.force for cell in matrix.cells("cpu") if cell.precision != "fp32")
    assert matrix.parity.method == "t-test" and matrix.workloads[0].target.of_fp32 == 0.95


def test_a_target_needs_one_value_and_a_rule_without_a_method_is_the_older_one():
    base = tiny_matrix()
    for target in ({}, {"value": 0.9, "of_fp32": 0.99}, {"value": 0.9, "eval_every": 0}):
        with pytest.raises(ValidationError):
            Matrix.model_validate({**base, "workloads": [{**base["workloads"][0], "target": target}]})
    # A workload without a target hashes as it did before targets existed: --resume keeps its records.
    assert "target" not in Matrix.model_validate(base).cells("cpu")[0].model_dump()
    assert ParityConfig.model_validate({"tolerance": 0.02, "k": 2.0}).method == "noise-floor"
    assert ParityConfig.model_validate({"tolerance": 0.02}).method == "t-test"


def test_the_fused_optimizer_is_off_by_default_and_leaves_other_cells_hashes_alone():
    plain = Matrix.model_validate(tiny_matrix()).cells("cpu")[0]
    assert plain.workload.fused_optimizer is False
    # torch's default optimizer is written as before the option existed: --resume keeps those records.
    assert "fused_optimizer" not in plain.model_dump()["workload"]
    fused_matrix = tiny_matrix()
    fused_matrix["workloads"][0]["fused_optimizer"] = True
    fused = Matrix.model_validate(fused_matrix).cells("cpu")[0]
    assert fused.model_dump(mode="json")["workload"]["fused_optimizer"] is True  # in the record's config
    assert fused.cell_id == plain.cell_id and fused.config_hash != plain.config_hash


def test_the_default_matrix_measures_the_remedies_for_launch_overhead_beside_its_eager_arms():
    """The LM and the MLP as users have them, with the fused optimizer, and with it under CUDA
    graphs; ResNet-50 in both layouts, eager: 8 arms of 4 precisions x 3 seeds."""
    matrix = load_matrix(EXPERIMENTS / "default.yaml")
    cells = matrix.cells("cuda")
    arms = {
        (c.workload.name, c.workload.workload, c.compile, c.workload.fused_optimizer, c.channels_last) for c in cells
    }
    assert arms == {
        ("resnet", "resnet", "off", False, False),
        ("resnet", "resnet", "off", False, True),
        ("transformer", "transformer", "off", False, False),
        ("transformer-fused", "transformer", "off", True, False),
        ("transformer-fused", "transformer", "reduce-overhead", True, False),
        ("mlp", "mlp", "off", False, False),
        ("mlp-fused", "mlp", "off", True, False),
        ("mlp-fused", "mlp", "reduce-overhead", True, False),
    }
    assert len(cells) == len(arms) * 4 * 3 == 96  # the count its header's time estimate is made for
    assert "transformer-fused/bs8/seed2/fp16/compile-reduce-overhead" in {c.cell_id for c in cells}
    # An arm differs from its eager twin in the remedy alone: the same model, data and target.
    by_name = {w.name: w.model_dump(exclude={"label", "compile", "fused_optimizer"}) for w in matrix.workloads}
    assert by_name["transformer-fused"] == by_name["transformer"] and by_name["mlp-fused"] == by_name["mlp"]


def test_smoke_forces_fp16_on_mlp_only():
    cells = load_matrix(EXPERIMENTS / "smoke.yaml").cells("cpu")
    forced = {(c.workload.name, c.precision) for c in cells if c.force}
    assert forced == {("mlp", "fp16")}


def test_cells_expand_every_combination_with_precisions_adjacent():
    matrix = Matrix.model_validate(tiny_matrix(repeats=2))
    cells = matrix.cells("cpu")
    assert len(cells) == 1 * 1 * 2 * 4
    assert [c.precision for c in cells[:4]] == ["fp32", "tf32", "fp16", "bf16"]
    assert [c.seed for c in cells] == [0] * 4 + [1] * 4
    assert len({c.cell_id for c in cells}) == len(cells)


def test_config_hash_tracks_the_resolved_config():
    a = Matrix.model_validate(tiny_matrix()).cells("cpu")[0]
    b = Matrix.model_validate(tiny_matrix(steps=5)).cells("cpu")[0]
    assert a.cell_id == b.cell_id and a.config_hash != b.config_hash


def test_select_filters_and_rejects_unknown_names():
    matrix = load_matrix(EXPERIMENTS / "smoke.yaml")
    kept = matrix.select(["mlp"], ["fp32", "bf16"])
    assert [w.name for w in kept.workloads] == ["mlp"] and kept.precisions == ["fp32", "bf16"]
    with pytest.raises(ConfigError, match=r"--precisions: no precision mode 'fp8': did you mean 'fp8-tensorwise' or"):
        matrix.select(None, ["fp8"])


def _mutated(mutate):
    data = copy.deepcopy(tiny_matrix())
    mutate(data)
    return data


INVALID = {
    "unknown workload": (
        lambda d: d["workloads"][0].update(workload="vit"),
        r"workloads\.0\.workload: .*'vit'.*'resnet', 'transformer', 'bert', 't5', 'mlp'",
    ),
    "unknown precision": (
        lambda d: d.update(precisions=["fp32", "fp8"]),  # fp8 is two modes: its recipes
        r"precisions\.1: unknown precision mode 'fp8': did you mean 'fp8-tensorwise' or 'fp8-rowwise'\? \(choose from",
    ),
    "wrong type": (lambda d: d.update(steps="many"), r"steps: .*valid integer.*\(got 'many'\)"),
    "zero steps": (lambda d: d.update(steps=0), r"steps: Input should be greater than or equal to 1 \(got 0\)"),
    "negative batch": (
        lambda d: d["workloads"][0].update(batch_sizes=[-8]),
        r"workloads\.0\.batch_sizes\.0: .*greater than or equal to 1 \(got -8\)",
    ),
    "steps beyond the limit": (lambda d: d.update(steps=10**12), r"steps: .*less than or equal to 1000000"),
    "infinite learning rate": (lambda d: d["workloads"][0].update(lr=float("inf")), r"lr: .*finite number"),
    "NaN tolerance": (lambda d: d.update(parity={"tolerance": float("nan")}), r"parity.tolerance: .*finite"),
    "name with a slash": (lambda d: d.update(name="a/b"), r"name: String should match pattern"),
    "name that is a parent folder": (lambda d: d.update(name=".."), r"name: String should match pattern"),
    "overlong name": (lambda d: d.update(name="x" * 65), r"name: String should have at most 64 characters"),
    "repeated batch sizes": (
        lambda d: d["workloads"][0].update(batch_sizes=[8, 8]),
        r"batch_sizes must not repeat: \[8, 8\]",
    ),
    "data that can't fit": (
        lambda d: d["workloads"][0].update(in_features=1 << 20, samples=1 << 20),
        r"would keep 4,098 GiB of data on the device; the limit is 64 GiB",
    ),
    "a model that can't fit": (
        lambda d: d["workloads"][0].update(hidden=1 << 16, depth=256),
        r"the model would have ~1.10e\+12 parameters",
    ),
    "expectation on an unknown workload": (
        lambda d: d.update(expect=[{"workload": "vit", "precision": "fp16", "parity": "fail"}]),
        r"expect: no workload named 'vit'",
    ),
    "expectation on a precision the matrix doesn't run": (
        lambda d: d.update(expect=[{"precision": "fp16-noscale", "parity": "fail"}]),
        r"expect: precision 'fp16-noscale' is not in precisions",
    ),
    "expectation that says nothing": (
        lambda d: d.update(expect=[{"precision": "fp16"}]),
        r"an expectation needs parity \(pass/fail\) or status",
    ),
    "huge bad value": (lambda d: d.update(steps="9" * 10_000), r"steps: .* \(got '9+\.\.\.\)$"),
    "unknown key": (lambda d: d.update(stepz=3), r"unknown key 'stepz': did you mean 'steps'\?"),
    "unknown workload key": (lambda d: d["workloads"][0].update(widht=3), r"workloads\.0: unknown key 'widht'"),
    "missing field": (lambda d: d.pop("steps"), r"'steps' is required"),
    "hub without a name": (
        lambda d: d["workloads"][0].update(data={"source": "hub"}),
        r"data.source hub needs data.name",
    ),
    "source the workload can't use": (
        lambda d: d["workloads"][0].update(data={"source": "text", "path": "x.txt"}),
        r"data.source 'text' is not available for mlp; choose from \('synthetic', 'digits'\)",
    ),
    "batch larger than data": (
        lambda d: d["workloads"][0].update(samples=4),
        r"samples \(4\) must be at least the largest batch size \(8\)",
    ),
    "fused optimizer not a boolean": (
        lambda d: d["workloads"][0].update(fused_optimizer="yes"),
        r"workloads\.0\.fused_optimizer: Input should be a valid boolean \(got 'yes'\)",
    ),
    "fused optimizer misspelt": (
        lambda d: d["workloads"][0].update(fused_optimiser=True),
        r"workloads\.0: unknown key 'fused_optimiser': did you mean 'fused_optimizer'\?",
    ),
}


@pytest.mark.parametrize("case", INVALID, ids=list(INVALID))
def test_invalid_matrix_is_one_clear_line(tmp_path, case):
    mutate, expected = INVALID[case]
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(_mutated(mutate)))
    with pytest.raises(ConfigError) as raised:
        load_matrix(path)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"matrix {path}: ")
    assert __import__("re").search(expected, message), message


@pytest.mark.parametrize(
    "text, expected",
    [("name: x\nsteps: [1\n", r"malformed YAML at line \d+, column \d+"), ("- just\n- a list\n", "expected a mapping")],
)
def test_unparseable_files(tmp_path, text, expected):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        load_matrix(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_matrix(tmp_path / "absent.yaml")


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    "content, expected",
    [
        (bytes(range(256)) * 4, "not UTF-8 text"),
        (b"name: x\n" + b"# padding\n" * 200_000, "larger than 1 MiB"),
        (BILLION_LAUGHS.encode(), "expands to more than 100,000 YAML nodes"),
        (b"name: &n [*n]\n", "a YAML alias refers to itself"),
    ],
    ids=["binary", "oversized", "alias bomb", "recursive alias"],
)
def test_files_that_are_not_matrices_fail_fast_and_small(tmp_path, content, expected):
    path = tmp_path / "m.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=expected) as raised:
        load_matrix(path)
    assert len(str(raised.value)) < 400


def test_an_endless_file_is_read_only_up_to_the_limit(tmp_path):
    with pytest.raises(ConfigError, match="is a character device, not a regular file"):
        load_matrix(Path("/dev/zero"))  # never read at all
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as sparse:
        sparse.truncate(1 << 40)  # a terabyte that takes no room: only the first MiB is read
    with pytest.raises(ConfigError, match="larger than 1 MiB"):
        load_matrix(huge)


def test_a_folder_is_not_a_matrix(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        load_matrix(tmp_path)


def test_aliases_within_the_limit_still_work(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: tiny\nsteps: 4\nprecisions: [fp32]\nworkloads:\n"
        "  - &small {workload: mlp, in_features: 16, hidden: 32, batch_sizes: [8], samples: 64, label: a}\n"
        "  - {<<: *small, label: b}\n"
    )
    assert [w.name for w in load_matrix(path).workloads] == ["a", "b"]


def test_numbers_read_as_users_write_them_though_the_schema_is_strict(tmp_path):
    """YAML 1.1 reads `1e-3` as a string; a strict schema would refuse it where a rate goes."""
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: tiny\nsteps: 4\nprecisions: [fp32]\nmax_grad_norm: 1e1\nworkloads:\n"
        "  - {workload: mlp, hidden: 32, batch_sizes: [8], samples: 64, lr: 3e-4}\n"
    )
    matrix = load_matrix(path)
    assert (matrix.workloads[0].lr, matrix.max_grad_norm) == (3e-4, 10.0)
    path.write_text(path.read_text().replace("steps: 4", "steps: 4e0"))  # a count stays a whole number
    with pytest.raises(ConfigError, match="steps: Input should be a valid integer"):
        load_matrix(path)


@pytest.mark.parametrize("workloads, precisions, expected", [
    ([], None, "--workloads: empty"),
    (None, ["fp32", "fp32"], "--precisions: names repeat"),
    (["mlp", "x" * 500], None, r"--workloads: no workload 'xxxxxxx"),
])  # fmt: skip
def test_selections_must_name_something_once(workloads, precisions, expected):
    matrix = Matrix.model_validate(tiny_matrix())
    with pytest.raises(ConfigError, match=expected) as raised:
        matrix.select(workloads, precisions)
    assert len(str(raised.value)) < 300


def test_selecting_drops_expectations_on_what_is_not_run():
    matrix = Matrix.model_validate(
        tiny_matrix(expect=[{"precision": "fp16", "parity": "fail"}, {"precision": "bf16", "status": "diverged"}])
    )
    kept = matrix.select(None, ["fp32", "bf16"])
    assert [e.precision for e in kept.expect] == ["bf16"]


def test_each_axis_has_one_registry_that_the_rest_derive_from():
    """Adding a workload is one config class listed in WORKLOAD_CONFIGS plus its module (a precision
    mode's policy is checked against config.precisions when amp_suite.cell.precision loads)."""
    import importlib

    from amp_suite.config.workloads import WORKLOAD_CONFIGS

    for config in WORKLOAD_CONFIGS:
        module = importlib.import_module(config.module)
        assert module.measure_benchmark if config.kernel_benchmark else module.WORKLOAD  # it measures, or trains it
        assert config.data_sources and config.throughput_unit


def test_an_hf_model_learns_from_random_weights_at_1e_3_and_is_fine_tuned_at_1e_4():
    from amp_suite.config.workloads import HfConfig

    base = {"workload": "hf", "model": "org/name", "batch_sizes": [4]}
    assert HfConfig.model_validate(base).lr == 1e-3
    assert HfConfig.model_validate({**base, "pretrained": True}).lr == 1e-4
    assert HfConfig.model_validate({**base, "pretrained": True, "lr": 3e-4}).lr == 3e-4  # a given one stays
