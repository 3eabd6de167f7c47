"""batch_sizes auto: the search's arithmetic against a stand-in probe, and the real path through
the CLI, where every probe is a fresh cell process that can run out of (simulated) CUDA memory."""

from __future__ import annotations

import pytest
import yaml
from conftest import REPO, amp_suite, read_records, tiny_matrix

from amp_suite.config import Matrix
from amp_suite.execution.batch_search import PROBE_STEPS, search_batch
from amp_suite.records.results import CellRecord

MLP = {"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": ["auto"], "samples": 256}


def auto_cell(**overrides):
    matrix = Matrix.model_validate(tiny_matrix(precisions=["bf16"], workloads=[MLP], **overrides))
    return matrix.cells("cuda")[0]


def probe_fitting(largest: int, fail_at: int | None = None):
    """A probe whose cell fits up to `largest`; `fail_at` fails for another reason."""
    tried = []

    def probe(spec):
        tried.append(spec.batch_size)
        # A probe is a short run of the cell itself, its whole warmup included: the allocator's
        # blocks fragment over those steps, and a probe that stopped sooner found a batch that then
        # ran out of memory in the measured cell's warmup (an H200, capped at 2 GiB).
        assert spec.steps == PROBE_STEPS and spec.warmup_steps == auto_cell().warmup_steps
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


def test_a_skipped_probe_ends_the_search_with_its_reason():
    def probe(spec):
        return CellRecord.for_spec(spec, "skipped", "bf16 needs compute capability >= 8.0; this GPU is 7.0")

    search = search_batch(auto_cell(), limit=4096, probe=probe)
    assert (search.found, search.failure, search.probes) == (None, None, [(8, "skipped")])
    assert search.skipped == "bf16 needs compute capability >= 8.0; this GPU is 7.0"


def test_the_training_set_a_probe_reports_caps_the_search_below_samples():
    probe, tried = probe_fitting(10_000)

    def with_data(spec):  # real data: 1,437 samples to train on, whatever `samples` allowed
        record = probe(spec)
        return record.model_copy(update={"train_samples": 1437}) if record.status == "ok" else record

    found = search_batch(auto_cell(), limit=4096, probe=with_data)
    assert (found.found, found.limited_by, found.failure) == (1437, "samples", None)
    assert max(tried) == 1437


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
import amp_suite.execution.batch_search
import amp_suite.cell.run
import amp_suite.cell.loop
from amp_suite.records.machine import cpu_caps

LARGEST = {"fp32": 40, "bf16": 90}
amp_suite.execution.batch_search.unsupported_reason = lambda device: None
amp_suite.cell.run.probe = lambda device: cpu_caps("simulated device", frozenset({"avx512_bf16"}))  # bf16 runs
real_step = amp_suite.cell.loop.Trainer.step


def step(self, inputs, targets):
    with open(os.environ["PIDS_FILE"], "a") as pids:
        pids.write(f"{os.getpid()}\\n")
    if inputs.shape[0] > LARGEST[self.policy.name]:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (simulated by the test)")
    return real_step(self, inputs, targets)


amp_suite.cell.loop.Trainer.step = step
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


def run_auto(tmp_path, hook: str, precisions: list[str], workload: dict, env: dict | None = None, **matrix):
    """`amp-suite run` of one auto workload, every process of it loading `hook` as sitecustomize."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(hook)
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(name="auto", precisions=precisions, workloads=[workload], **matrix)))
    out = tmp_path / "out"
    # One thread: these matmuls are tiny, and on a busy box OpenMP's spinning workers made each
    # probe several times slower.
    env = {"PYTHONPATH": str(tmp_path / "hooks"), "OMP_NUM_THREADS": "1", **(env or {})}
    done = amp_suite("run", "--matrix", str(path), "--out", str(out), "--device", "cpu", cwd=tmp_path, env=env)
    return done, {record["precision"]: record for record in read_records(out)}


# The search believes this device reports running out of memory (as CUDA does); nothing runs out.
REPORTS_OOM = """
import amp_suite.execution.batch_search

amp_suite.execution.batch_search.unsupported_reason = lambda device: None
"""


@pytest.mark.slow
def test_the_search_ends_where_the_device_cannot_run_the_mode_and_at_the_real_training_set(tmp_path):
    """One run, two ends of a search. tf32 needs compute capability 8.0, as on a V100 or T4; on a CPU
    it is skipped the same way, at its first probe. digits' training split has 1,437 samples, and
    `samples` is only a cap on real data: fp32's search stops there, not at 2,048."""
    done, records = run_auto(tmp_path, REPORTS_OOM, ["fp32", "tf32"], {**MLP, "samples": 2048})
    assert done.returncode == 0, done.stdout + done.stderr
    tf32 = records["tf32"]
    assert tf32["status"] == "skipped" and tf32["reason"].startswith("TF32 needs an NVIDIA GPU")
    assert tf32["batch_search"]["probes"] == [[8, "skipped"]]
    fp32 = records["fp32"]
    assert fp32["status"] == "ok" and fp32["train_samples"] == fp32["batch_size"] == 1437
    search = fp32["batch_search"]
    assert (search["limited_by"], search["failure"]) == ("samples", None)
    assert max(batch for batch, _ in search["probes"]) == 1437


# A device with a memory budget (DEVICE_BYTES): every tensor storage created while a cell measures
# (the data on the device, the model, its copies, activations, gradients, optimizer state) counts
# until it is freed, and past the budget an allocation raises CUDA's out-of-memory error.
# Activations grow with the batch, and autocast's bf16 ones take half the bytes: what decides the
# largest batch on a GPU. gpu-check's rehearsal loads the same file.
SIMULATED_MEMORY = (REPO / "scripts" / "simulated_memory" / "sitecustomize.py").read_text()
# 4 inputs, 32 hidden: weights are small, so activations fill the budget at these batches.
NARROW = {**MLP, "in_features": 4, "samples": 512, "data": {"source": "synthetic", "val_samples": 64}}


@pytest.mark.slow
def test_amp_fits_a_larger_batch_than_fp32_where_its_tensors_fill_the_memory(tmp_path):
    # 100 kB: fp32 fits 116 samples, bf16 200 (measured). Step diagnostics at the full batch in fp32
    # (an fp32 backward outside autocast) held bf16 to 124: fp32's own limit and a little.
    env = {"DEVICE_BYTES": str(100_000)}
    # As many steps as a probe: the batch order on the device grows with them, and at this scale
    # even its 8 bytes a sample and step would tip the measured cell past the probe that fitted.
    steps = {"steps": PROBE_STEPS}
    done, records = run_auto(tmp_path, SIMULATED_MEMORY, ["fp32", "bf16"], NARROW, env, **steps)
    fp32, bf16 = records["fp32"], records["bf16"]
    assert (fp32["status"], bf16["status"], done.returncode) == ("ok", "ok", 0), done.stdout + done.stderr
    assert fp32["batch_search"]["limited_by"] == bf16["batch_search"]["limited_by"] == "memory"
    assert bf16["batch_size"] >= 1.5 * fp32["batch_size"], (fp32["batch_size"], bf16["batch_size"])
    # The cell measured at the found batch ran its diagnostics too, and says on how many samples.
    assert bf16["flops_per_step"] and bf16["diagnostics_batch_size"] == -(-bf16["batch_size"] // 4)
