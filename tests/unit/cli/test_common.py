from __future__ import annotations

from pathlib import Path

import pytest

from amp_suite.cli import EXPERIMENTS_DIR, default_matrix, deployment_environment, resolve_matrix
from amp_suite.cli.common import fail, no_gpu_advice
from amp_suite.config import ConfigError


def test_matrix_by_path_or_by_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # as in the container: no experiments/ under the working directory
    assert resolve_matrix(Path("smoke")) == EXPERIMENTS_DIR / "smoke.yaml"
    assert resolve_matrix(Path("experiments/failure-modes.yaml")) == EXPERIMENTS_DIR / "failure-modes.yaml"
    assert default_matrix("cuda") == EXPERIMENTS_DIR / "default.yaml"
    assert default_matrix("cpu") == EXPERIMENTS_DIR / "smoke.yaml"
    own = tmp_path / "smoke.yaml"
    own.write_text("name: mine\n")
    assert resolve_matrix(Path("smoke.yaml")) == Path("smoke.yaml")  # a real file wins
    assert resolve_matrix(Path("absent.yaml")) == Path("absent.yaml")  # load_matrix reports it


def test_image_identity_comes_from_the_environment(monkeypatch):
    for key in ("AMP_SUITE_IMAGE_BASE", "AMP_SUITE_IMAGE_TORCH_INDEX", "AMP_SUITE_GIT_COMMIT"):
        monkeypatch.delenv(key, raising=False)
    assert deployment_environment() == {}
    monkeypatch.setenv("AMP_SUITE_IMAGE_BASE", "nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04")
    monkeypatch.setenv("AMP_SUITE_IMAGE_TORCH_INDEX", "cu130")
    monkeypatch.setenv("AMP_SUITE_GIT_COMMIT", "abc123")
    assert deployment_environment() == {
        "image": {"base": "nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04", "torch_index": "cu130"},
        "git_commit": "abc123",
    }


def test_a_shipped_name_wins_over_a_folder_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke").mkdir()  # e.g. the --out of an earlier smoke run
    assert resolve_matrix(Path("smoke")) == EXPERIMENTS_DIR / "smoke.yaml"
    assert resolve_matrix(tmp_path / "smoke") == tmp_path / "smoke"  # a path is taken as given


def test_a_shipped_name_mistyped_gets_the_names_it_is_close_to(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for given in ("smok", "smok.yaml"):
        with pytest.raises(ConfigError, match=rf"matrix {given}: no such file, nor a shipped matrix of that name: "
                           r"did you mean 'smoke'"):  # fmt: skip
            resolve_matrix(Path(given))
    assert resolve_matrix(Path("zzz")) == Path("zzz")  # close to nothing: load_matrix says "no such file"


@pytest.mark.parametrize("container, cuda, advice, not_advised", [
    (True, "13.0", "docker run --gpus all", "install a CUDA build"),
    (False, None, "CPU-only build: install a CUDA build", "docker"),
    (False, "13.0", "check that nvidia-smi lists a GPU", "docker"),
])  # fmt: skip
def test_no_gpu_advice_is_what_applies_where_the_command_runs(container, cuda, advice, not_advised):
    said = no_gpu_advice(container, cuda)
    assert advice in said and not_advised not in said, said


def test_a_list_of_problems_stays_a_list_other_line_breaks_do_not(capsys):
    fail("matrix m.yaml: 2 problems:\n  steps: bad\n  lr: bad")
    fail("a message from\na library")
    assert capsys.readouterr().err == (
        "amp-suite: error: matrix m.yaml: 2 problems:\n  steps: bad\n  lr: bad\n"
        "amp-suite: error: a message from a library\n"
    )


def test_help_shows_no_type_beside_a_flag():
    from typer.testing import CliRunner

    from amp_suite.cli import app

    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "--help" in shown and "<bool>" not in shown, shown
    assert "<auto|cuda|cpu>" in shown  # an option that takes a value keeps its type
