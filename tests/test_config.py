from __future__ import annotations

import copy

import pytest
import yaml
from conftest import EXPERIMENTS, tiny_matrix

from amp_suite.config import PRECISIONS, ConfigError, Matrix, load_matrix


@pytest.mark.parametrize("name", ["smoke.yaml", "default.yaml"])
def test_shipped_matrices_load(name):
    matrix = load_matrix(EXPERIMENTS / name)
    assert {w.workload for w in matrix.workloads} == {"resnet", "transformer", "mlp"}
    assert tuple(matrix.precisions) == PRECISIONS[:4]  # fp16-noscale is for failure-modes.yaml only


def test_failure_modes_matrix_pits_scaled_against_unscaled_fp16():
    matrix = load_matrix(EXPERIMENTS / "failure-modes.yaml")
    assert matrix.precisions == ["fp32", "fp16", "fp16-noscale"] and matrix.repeats >= 2
    assert all(cell.force for cell in matrix.cells("cpu") if cell.precision != "fp32")


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
    with pytest.raises(ConfigError, match=r"--precisions: unknown \['fp8'\]"):
        matrix.select(None, ["fp8"])


def _mutated(mutate):
    data = copy.deepcopy(tiny_matrix())
    mutate(data)
    return data


INVALID = {
    "unknown workload": (
        lambda d: d["workloads"][0].update(workload="vit"),
        r"workloads\.0\.workload: .*'vit'.*'resnet', 'transformer', 'mlp'",
    ),
    "unknown precision": (
        lambda d: d.update(precisions=["fp32", "fp8"]),
        r"precisions\.1: .*'fp32', 'tf32', 'fp16', 'bf16' or 'fp16-noscale' \(got 'fp8'\)",
    ),
    "wrong type": (lambda d: d.update(steps="many"), r"steps: .*valid integer.*\(got 'many'\)"),
    "zero steps": (lambda d: d.update(steps=0), r"steps: Input should be greater than 0 \(got 0\)"),
    "negative batch": (
        lambda d: d["workloads"][0].update(batch_sizes=[-8]),
        r"workloads\.0\.batch_sizes\.0: .*greater than 0 \(got -8\)",
    ),
    "unknown key": (lambda d: d.update(stepz=3), r"stepz: Extra inputs are not permitted"),
    "unknown workload key": (lambda d: d["workloads"][0].update(widht=3), r"workloads\.0\.widht: Extra inputs"),
    "missing field": (lambda d: d.pop("steps"), r"steps: Field required"),
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
