"""scripts/container-check.sh, checked without building anything (CI runs it for real: .ci/run)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from conftest import EXPERIMENTS, REPO

SCRIPT = REPO / "scripts" / "container-check.sh"


def test_ci_and_make_run_the_container_check():
    assert "make container-check" in (REPO / ".ci" / "run").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert "container-check" in makefile.split(".PHONY:", 1)[1].splitlines()[0]
    assert "\tbash scripts/container-check.sh" in makefile


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_script_parses():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_podman_settings_are_the_projects_not_the_machines():
    text = SCRIPT.read_text()
    assert "CONTAINERS_CONF:-$REPO/docker/containers.conf" in text
    conf = (REPO / "docker" / "containers.conf").read_text()
    for setting in (r'runtime = "runc"', r'cgroup_manager = "cgroupfs"', r"default_ulimits = \[\]"):
        assert re.search(rf"^{setting}$", conf, re.M), setting
    assert "--format docker --network host" in text  # the Dockerfile's SHELL; the build's pip needs the network


def test_a_stand_in_base_is_announced_and_everything_made_is_removed():
    text = SCRIPT.read_text()
    assert "STAND-IN BASE:" in text and "not the NVIDIA image" in text
    assert "trap cleanup EXIT" in text and "podman rmi" in text


def test_the_check_matrix_is_tiny_and_compiles():
    from amp_suite.config import load_matrix

    matrix = load_matrix(EXPERIMENTS / "container-check.yaml")
    cells = matrix.cells("cpu")
    assert len(cells) <= 4 and all(cell.steps <= 50 for cell in cells)
    assert {cell.compile for cell in cells if cell.precision == "fp32"} == {"off", "default"}
