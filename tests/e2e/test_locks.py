"""Each CUDA line resolves to its own torch build: checked from the lock files alone.

The shared constraints.txt must pin nothing that belongs to one CUDA line (torch, torchvision,
Triton, the nvidia-*/cuda-* wheels), and locks/<line>.txt must pin nothing of another line: a
cu126 image that sees a CUDA 13 wheel either fails to resolve or falls back to the wrong torch.
"""

from __future__ import annotations

import re
import sys

import pytest
from conftest import REPO

LOCKS = sorted((REPO / "locks").glob("*.txt"))
LINE_NAME = re.compile(r"^cu(\d\d)(\d)$")  # cu130 -> CUDA 13.0, cu126 -> CUDA 12.6
# Unsuffixed wheels whose version's major is the CUDA major (nvidia-cufft 12.x ships with CUDA 13: not listed)
VERSIONED_LIKE_CUDA = {
    "cuda-toolkit",
    "cuda-bindings",
    "nvidia-cuda-runtime",
    "nvidia-cuda-nvrtc",
    "nvidia-cuda-cupti",
    "nvidia-nvjitlink",
    "nvidia-nvtx",
}


def _pins(path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return pins


def _belongs_to_a_cuda_line(name: str) -> bool:
    if name == "nvidia-ml-py":  # NVML's bindings: one version serves every line
        return False
    return name in {"torch", "torchvision", "triton"} or name.startswith(("nvidia-", "cuda-"))


def _cuda_major(name: str, version: str) -> int | None:
    """The CUDA major version a pin belongs to, where its name, version or local label says so."""
    if suffix := re.search(r"-cu(\d+)$", name):
        return int(suffix.group(1))
    if label := re.search(r"\+cu(\d\d)\d$", version):
        return int(label.group(1))
    if name in VERSIONED_LIKE_CUDA:
        return int(version.split(".")[0])
    return None


def test_the_shared_constraints_pin_no_cuda_line_package():
    line_pins = [name for name in _pins(REPO / "constraints.txt") if _belongs_to_a_cuda_line(name)]
    assert line_pins == [], "move these to locks/<line>.txt (make lock does): " + ", ".join(line_pins)


@pytest.mark.parametrize("lock", LOCKS, ids=[path.stem for path in LOCKS])
def test_each_lock_pins_its_own_cuda_line_and_nothing_else(lock):
    line = LINE_NAME.match(lock.stem)
    assert line, f"{lock.name}: name it after PyTorch's index, e.g. cu130"
    pins = _pins(lock)
    assert {"torch", "torchvision"} <= pins.keys()
    shared = [name for name in pins if not _belongs_to_a_cuda_line(name)]
    assert shared == [], f"{lock.name} pins shared packages; they belong in constraints.txt: {shared}"
    major = int(line[1])
    foreign = {name: version for name, version in pins.items() if _cuda_major(name, version) not in (None, major)}
    assert foreign == {}, f"{lock.name} pins another CUDA line's wheels"


def test_every_line_builds_the_same_torch():
    versions = {lock.stem: _pins(lock)["torch"].split("+")[0] for lock in LOCKS}
    assert len(set(versions.values())) == 1, versions


def test_the_check_catches_a_cuda_13_wheel_in_the_cu126_line():
    """The mistake the split exists to prevent, fed to the same rule the tests above apply."""
    assert _cuda_major("nvidia-cudnn-cu13", "9.24.0.43") == 13
    assert _cuda_major("cuda-toolkit", "13.0.3.0") == 13
    assert _cuda_major("torch", "2.14.1+cu126") == 12
    assert _cuda_major("nvidia-cufft", "12.0.0.61") is None  # its version says nothing about CUDA


def test_every_image_line_the_readme_and_dockerfile_name_has_a_lock():
    """The CUDA-line table (`| `cu130` | ... | `locks/cu130.txt` |`) lives in docs/containers.md,
    which the README's index points to."""
    dockerfile = (REPO / "Dockerfile").read_text()
    default_line = re.search(r"^ARG TORCH_CUDA=(\S+)", dockerfile, re.M).group(1)
    default_cuda = re.search(r"^ARG CUDA_VERSION=(\d+)\.", dockerfile, re.M).group(1)
    assert LINE_NAME.match(default_line)[1] == default_cuda, "the base image's CUDA major differs from torch's"
    page = (REPO / "docs" / "containers.md").read_text()
    documented_lines = set(re.findall(r"^\| `(cu\d+)`", page, re.M))
    assert default_line in documented_lines
    assert documented_lines == {lock.stem for lock in LOCKS}
    for line in documented_lines:
        assert re.search(rf"^\| `{line}`.*`locks/{line}\.txt`", page, re.M)


def test_make_lock_keeps_nvml_bindings_shared_and_moves_the_cuda_wheels():
    sys.path.insert(0, str(REPO / "scripts"))
    from split_lock import split

    freeze = ["mlflow==3.17.2", "nvidia-ml-py==13.615.71", "nvidia-cublas==13.1.1.3", "torch==2.14.1", "Triton==3.8.0"]
    shared, line = split(freeze)
    assert shared == ["mlflow==3.17.2", "nvidia-ml-py==13.615.71"]
    assert line == ["nvidia-cublas==13.1.1.3", "torch==2.14.1", "Triton==3.8.0"]


def test_offline_wheels_leave_out_the_boxs_own_pytorch_and_whatever_it_has(tmp_path):
    """An offline GPU box's own torch is what gets measured: its wheels are never fetched, nor what it lists."""
    sys.path.insert(0, str(REPO / "scripts"))
    from offline_wheels import THE_BOXS_OWN, dependencies, names_in

    wanted = {re.split(r"[<>=]", spec)[0] for spec in dependencies()}
    assert {"torch", "torchvision"}.isdisjoint(wanted) and {"mlflow", "torchao", "nvidia-ml-py"} <= wanted
    assert {"timm", "pytest", "pytest-timeout"} <= wanted  # gpu-check's probe and gpu-tests stage
    assert {"ruff", "coverage", "ray"}.isdisjoint(wanted)  # the rest of the extras: not gpu-check's
    assert all(THE_BOXS_OWN.match(name) for name in ("torch", "triton", "nvidia-cublas", "torchvision"))
    assert not THE_BOXS_OWN.match("torchao")
    freeze = tmp_path / "have.txt"
    freeze.write_text("# pip list\nPyYAML==6.0.2\nhuggingface_hub==1.33.0\nnumpy\n\n")
    assert names_in(freeze) == {"pyyaml", "huggingface-hub", "numpy"}
