"""A ROCm build of PyTorch presents an AMD GPU as CUDA (issue 54): through the CLI, with torch's
answers for an MI300X patched in at interpreter start (sitecustomize) as a ROCm build gives them,
the suite refuses it in one line, exit 2, before anything is written, and never takes its
compute capability 9.4 for a Hopper. The same machine's CPU still runs."""

from __future__ import annotations

import pytest
from conftest import amp_suite

ROCM_MI300X = """
import torch

torch.version.hip = "6.2.41133-dd7f95766"
torch.cuda.is_available = lambda: True
torch.cuda.get_device_name = lambda *index: "AMD Instinct MI300X"
torch.cuda.get_device_capability = lambda *index: (9, 4)  # gfx942
"""


@pytest.fixture
def rocm(tmp_path):
    site = tmp_path / "rocm"
    site.mkdir()
    (site / "sitecustomize.py").write_text(ROCM_MI300X)
    return {"PYTHONPATH": str(site)}


@pytest.mark.parametrize(
    "command", [("doctor",), ("run", "--out", "out"), ("inspect", "--workload", "mlp", "--precision", "bf16")]
)
def test_an_amd_gpu_under_rocm_is_refused_in_one_line_before_anything_runs(tmp_path, rocm, command):
    done = amp_suite(*command, cwd=tmp_path, env=rocm)
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert "AMD Instinct MI300X, read as compute capability 9.4" in line and "ROCm (HIP 6.2" in line, line
    assert "--device cpu" in line and "Hopper" not in done.stdout
    assert not (tmp_path / "out").exists()


def test_the_cpu_of_a_rocm_machine_is_described_as_a_cpu(tmp_path, rocm):
    done = amp_suite("doctor", "--device", "cpu", "--json", cwd=tmp_path, env=rocm)
    assert done.returncode == 0, done.stderr
    assert '"device": "cpu"' in done.stdout and "MI300X" not in done.stdout
