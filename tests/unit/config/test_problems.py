"""A matrix's problems in words (amp_suite.config.problems): every one, a typo'd key once, as the
key it was likely meant to be, a missing field as required, names with their nearest valid names."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import tiny_matrix

from amp_suite.config import ConfigError, Matrix, load_matrix
from amp_suite.config.problems import MAX_SHOWN, close_names, did_you_mean, not_among


def _problems_of(tmp_path, mutate) -> str:
    data = copy.deepcopy(tiny_matrix())
    mutate(data)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as raised:
        load_matrix(path)
    message = str(raised.value)
    assert message.startswith(f"matrix {path}: ")
    return message.removeprefix(f"matrix {path}: ")


def _renamed(where: str, old: str, new: str):
    def mutate(data):
        block = data["workloads"][0] if where == "workload" else data
        block[new] = block.pop(old)

    return mutate


ONE_PROBLEM = {
    "a typo'd workload key is one problem, not a missing field": (
        _renamed("workload", "batch_sizes", "batch_size"),
        "workloads.0: unknown key 'batch_size': did you mean 'batch_sizes'?",
    ),
    "a typo'd top-level key": (
        _renamed("matrix", "precisions", "precison"),
        "unknown key 'precison': did you mean 'precisions'?",
    ),
    "a typo beside the key it meant: the model's keys": (
        lambda d: d.update(step=3),
        "unknown key 'step': did you mean 'steps'?",
    ),
    "a typo in a nested block": (
        lambda d: d["workloads"][0].update(data={"sorce": "digits"}),
        "workloads.0.data: unknown key 'sorce': did you mean 'source'?",
    ),
    "a key close to nothing": (lambda d: d.update(zzzz=1), "unknown key 'zzzz'"),
    "a missing field is required, in words": (
        lambda d: d["workloads"][0].pop("batch_sizes"),
        "workloads.0: 'batch_sizes' is required",
    ),
    "a missing top-level field": (lambda d: d.pop("steps"), "'steps' is required"),
    "a precision mode's typo": (
        lambda d: d.update(precisions=["fp32", "fp61"]),
        "precisions.1: unknown precision mode 'fp61': did you mean 'fp16'? (choose from 'fp32', 'tf32', 'fp16',",
    ),
    "fp8 is the start of two modes": (
        lambda d: d.update(precisions=["fp32", "fp8"]),
        "precisions.1: unknown precision mode 'fp8': did you mean 'fp8-tensorwise' or 'fp8-rowwise'?",
    ),
    "a workload's typo": (
        lambda d: d["workloads"][0].update(workload="mlpp"),
        "workloads.0.workload: unknown workload 'mlpp': did you mean 'mlp'? (choose from 'resnet',",
    ),
    "the workload key typo'd": (
        _renamed("workload", "workload", "wrkload"),
        "workloads.0: unknown key 'wrkload': did you mean 'workload'?",
    ),
    "the workload key missing": (
        lambda d: d["workloads"][0].pop("workload"),
        "workloads.0: 'workload' is required (one of resnet, transformer,",
    ),
}


@pytest.mark.parametrize("case", ONE_PROBLEM, ids=list(ONE_PROBLEM))
def test_one_problem_is_one_line_in_words(tmp_path, case):
    mutate, expected = ONE_PROBLEM[case]
    said = _problems_of(tmp_path, mutate)
    assert "\n" not in said and said.startswith(expected), said
    assert "Field required" not in said and "Extra inputs" not in said, said


def test_every_problem_is_named_a_line_each_up_to_a_few(tmp_path):
    def many(data):
        data["stepz"] = data.pop("steps")  # a typo: one problem, not "steps: Field required" too
        data["precisions"] = ["fp61", "fp32"]
        data["repeats"] = 0
        data["workloads"][0].update(hiden=3, lr=-1.0, samples=0)
        data["workloads"][0]["batch_size"] = data["workloads"][0].pop("batch_sizes")

    lines = _problems_of(tmp_path, many).split("\n")
    assert lines[0] == "7 problems:", lines
    listed = lines[1 : 1 + MAX_SHOWN]
    assert all(line.startswith("  ") for line in listed) and lines[-1] == f"  and {7 - MAX_SHOWN} more", lines
    said = "\n".join(lines)
    assert "  unknown key 'stepz': did you mean 'steps'?" in said  # where steps would have been reported: first
    assert "required" not in said and said.count("batch_size") == 2, said  # the typo, once, and its fix


def test_a_single_problem_keeps_the_one_line_callers_expect(tmp_path):
    said = _problems_of(tmp_path, lambda d: d.update(steps=0))
    assert said == "steps: Input should be greater than or equal to 1 (got 0)"


def test_names_get_their_nearest_valid_names():
    assert close_names("fp8", ["fp32", "fp8-tensorwise", "fp8-rowwise"]) == ["fp8-tensorwise", "fp8-rowwise"]
    assert did_you_mean("smok", ["smoke", "default"]) == ": did you mean 'smoke'?"
    assert did_you_mean("zzz", ["smoke", "default"]) == ""


def test_a_known_name_the_matrix_does_not_run_is_said_so():
    assert not_among("fp16", "precision mode", ["fp32", "bf16"], ["fp32", "fp16", "bf16"]) == (
        "fp16 is a precision mode this matrix does not run"
    )
    assert not_among("bf61", "precision mode", ["fp32", "bf16"], ["fp32", "fp16", "bf16"]) == (
        "no precision mode 'bf61': did you mean 'bf16'?"
    )


def test_selecting_a_mode_the_matrix_does_not_run():
    matrix = Matrix.model_validate(tiny_matrix(precisions=["fp32", "bf16"]))
    with pytest.raises(ConfigError) as raised:
        matrix.select(None, ["fp16"])
    assert str(raised.value) == (
        "--precisions: fp16 is a precision mode this matrix does not run (this matrix runs fp32, bf16)"
    )
    with pytest.raises(ConfigError, match=r"--workloads: resnet is a workload this matrix does not run; no workload "
                       r"'mlpp': did you mean 'mlp'\? \(this matrix runs mlp\)"):  # fmt: skip
        matrix.select(["resnet", "mlpp"], None)
