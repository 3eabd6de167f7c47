"""batch_sizes auto: the search's arithmetic against a stand-in probe, and the real path through
the CLI, where every probe is a fresh cell process that can run out of (simulated) CUDA memory."""

from __future__ import annotations

import pytest
import yaml
from conftest import amp_suite, read_records, tiny_matrix

from amp_suite.batch_search import search_batch
from amp_suite.config import Matrix
from amp_suite.results import CellRecord

MLP = {"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": ["auto"], "samples": 256}


def auto_cell(**overrides):
    matrix = Matrix.model_validate(tiny_matrix(precisions=["bf16"], workloads=[MLP], **overrides))
    return matrix.cells("cuda")[0]


def probe_fitting(largest: int, fail_at: int | None = None):
    """A probe whose cell fits up to `largest`; `fail_at` fails for another reason."""
    tried = []

    def probe(spec):
        tried.append(spec.batch_size)
        assert spec.steps == 2 and spec.warmup_steps == 1  # a probe is a short run of the cell itself
        if spec.batch_size == fail_at:
            return CellRecord.for_spec(spec, "failed", "RuntimeError: cuDNN error")
        return CellRecord.for_spec(spec, "ok" if spec.batch_size <= largest else "oom")

    return probe, tried


@pytest.mark.parametrize("largest", [1, 7, 8, 100, 129, 1000])
def test_the_search_finds_the_largest_batch_within_a_sixteenth(largest):
    probe, tried = probe_fitting(largest)
    found = search_batch(auto_cell(), limit=4096, probe=probe)
    assert found.found is not None and largest - max(1, largest // 16) <= found.found <= largest
    assert found.limited_by == "memory" and found.failure is None
    assert [batch for batch, _ in found.probes] == tried and len(tried) <= 2 * 12  # doubling, then bisection


def test_the_samples_cap_the_search_and_say_so():
    probe, _ = probe_fitting(10_000)
    found = search_batch(auto_cell(), limit=256, probe=probe)
    assert (found.found, found.limited_by) == (256, "samples")


def test_nothing_fits_or_a_probe_fails_otherwise():
    probe, tried = probe_fitting(0)
    nothing = search_batch(auto_cell(), limit=256, probe=probe)
    assert nothing.found is None and tried == [8, 4, 2, 1]
    probe, _ = probe_fitting(1000, fail_at=64)
    failed = search_batch(auto_cell(), limit=4096, probe=probe)
    assert failed.found == 32 and failed.failure == "probe at batch 64: failed: RuntimeError: cuDNN error"


def test_auto_is_skipped_with_the_reason_on_a_cpu(tmp_path):
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(precisions=["fp32"], workloads=[{**MLP, "batch_sizes": [8, "auto"]}])))
    done = amp_suite("run", "--matrix", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    records = {r["cell_id"]: r for r in read_records(tmp_path / "out")}
    assert records["mlp/bs8/seed0/fp32"]["status"] == "ok"
    skipped = records["mlp/bsauto/seed0/fp32"]
    assert skipped["status"] == "skipped" and "OOM killer" in skipped["reason"] and skipped["batch_size"] is None


# Loaded by every process of the run through PYTHONPATH: the search believes this device reports
# running out of memory (as CUDA does), and a training step raises CUDA's out-of-memory error above
# a per-precision batch. Each cell process writes its pid, to show every probe is a fresh process.
SIMULATED_DEVICE = """
import os
import torch
import amp_suite.batch_search
import amp_suite.loop

LARGEST = {"fp32": 40, "bf16": 90}
amp_suite.batch_search.unsupported_reason = lambda device: None
real_step = amp_suite.loop.Trainer.step


def step(self, inputs, targets):
    with open(os.environ["PIDS_FILE"], "a") as pids:
        pids.write(f"{os.getpid()}\\n")
    if inputs.shape[0] > LARGEST[self.policy.name]:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (simulated by the test)")
    return real_step(self, inputs, targets)


amp_suite.loop.Trainer.step = step
"""


@pytest.mark.slow
def test_the_largest_batch_per_precision_is_found_by_fresh_processes_and_reported(tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(SIMULATED_DEVICE)
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(name="auto", precisions=["fp32", "bf16"], workloads=[MLP])))
    pids = tmp_path / "pids"
    env = {"PYTHONPATH": str(tmp_path / "hooks"), "PIDS_FILE": str(pids)}
    out = tmp_path / "out"
    done = amp_suite("run", "--matrix", str(path), "--out", str(out), "--device", "cpu", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    records = {r["precision"]: r for r in read_records(out)}
    fp32, bf16 = records["fp32"], records["bf16"]
    assert fp32["status"] == bf16["status"] == "ok"
    assert 38 <= fp32["batch_size"] <= 40 and 85 <= bf16["batch_size"] <= 90  # within 1/16 of the truth
    assert fp32["cell_id"] == "mlp/bsauto/seed0/fp32" and fp32["config"]["batch_size"] == "auto"
    probes = fp32["batch_search"]["probes"] + bf16["batch_search"]["probes"]
    assert ("oom" in {status for _, status in probes}) and fp32["batch_search"]["limited_by"] == "memory"
    processes = set(pids.read_text().split())
    assert len(processes) == len(probes) + 2  # every probe, and each measured cell, in its own process
    assert "max 40" in done.stdout or "max 39" in done.stdout or "max 38" in done.stdout
    report = (out / "report" / "report.md").read_text()
    assert "Largest batch that fits" in report
    ratio = bf16["batch_size"] / fp32["batch_size"]
    assert f"{ratio:.2f}x" in report  # how much larger a batch bf16 fits
