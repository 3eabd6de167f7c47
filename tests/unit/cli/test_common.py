from __future__ import annotations

from pathlib import Path

from amp_suite.cli import EXPERIMENTS_DIR, default_matrix, deployment_environment, resolve_matrix


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
