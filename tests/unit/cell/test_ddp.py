"""DDP cells: config axes, the gloo run through the CLI, its summary and claim, MFU, and a rank
that dies or runs out of memory."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, process_alive, read_records, start_amp_suite, tiny_matrix, wait_for

from amp_suite.analysis.answer import answers
from amp_suite.analysis.summary import summarize
from amp_suite.cell import run as cell_module
from amp_suite.cell.ddp import launch
from amp_suite.cell.run import run_cell
from amp_suite.config import ConfigError, Matrix, load_matrix
from amp_suite.hardware.peaks import peak_tflops
from amp_suite.records.machine import Machine, cuda_caps
from amp_suite.records.results import CellRecord
from amp_suite.report.claims import THRESHOLDS, Evidence, ddp_communication_bound

MLP = {"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": [8], "samples": 256,
       "data": {"source": "synthetic", "val_samples": 64}, "force": ["bf16"]}  # fmt: skip  (bf16 on any CPU: conftest)


# -- config: the axes, and cells without them unchanged ------------------------------------------


def test_ddp_axes_expand_into_cells_and_other_cells_keep_their_identity():
    plain = Matrix.model_validate(tiny_matrix(precisions=["fp32"]))
    axes = {"world_size": [1, 2], "comm_hook": ["none", "fp16"]}
    ddp = Matrix.model_validate(tiny_matrix(precisions=["fp32"], workloads=[{**MLP, "ddp": axes}]))
    before = plain.cells("cpu")[0]
    assert "ddp" not in before.model_dump() and "ddp" not in before.workload.model_dump()
    assert '"ddp"' not in before.model_dump_json()  # what config_hash hashes: unchanged for older records
    assert before.gpus == 1 and before.cell_id == "mlp/bs8/seed0/fp32"
    cells = ddp.cells("cpu")
    assert [c.cell_id for c in cells] == [
        "mlp/bs8/seed0/fp32/ddp1", "mlp/bs8/seed0/fp32/ddp1-fp16hook",
        "mlp/bs8/seed0/fp32/ddp2", "mlp/bs8/seed0/fp32/ddp2-fp16hook",
    ]  # fmt: skip
    assert [c.gpus for c in cells] == [1, 1, 2, 2]
    assert len({c.config_hash for c in cells}) == 4


@pytest.mark.parametrize(
    "ddp, message",
    [
        ({"world_size": [0]}, "greater than or equal to 1"),
        ({"world_size": [65]}, "less than or equal to 64"),
        ({"world_size": [True]}, "valid integer"),
        ({"world_size": [2, 2]}, "must not repeat"),
        ({"world_size": [2], "comm_hook": ["int8"]}, "'none', 'fp16' or 'bf16'"),
        ({"world_size": []}, "at least 1 item"),
    ],
)
def test_bad_ddp_axes_are_refused(tmp_path, ddp, message):
    """Refused where `amp-suite run` reads the matrix, as one line: how the CLI exits on such a line
    (2, nothing written) is tests/e2e/test_bad_input.py's, for every bad matrix alike."""
    matrix = tmp_path / "bad.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix(workloads=[{**MLP, "ddp": ddp}])))
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        load_matrix(matrix)
    assert "\n" not in str(refused.value)


def test_ddp_needs_fixed_batch_sizes():
    with pytest.raises((ConfigError, ValueError), match="fixed batch sizes"):
        Matrix.model_validate(tiny_matrix(workloads=[{**MLP, "batch_sizes": ["auto"], "ddp": {"world_size": [2]}}]))


# -- summary and claim, from records alone ----------------------------------------------------------

CPU = Machine(device_type="cpu", device_name="cpu", host="box", torch="2.14.1", threads=2)
GPU = Machine(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", torch="2.14.1")


def _record(world: int, hook: str, seed: int, throughput: float, share: float, metric: float) -> CellRecord:
    spec = next(
        c for c in Matrix.model_validate(
            tiny_matrix(precisions=["bf16"], repeats=2, workloads=[{**MLP, "ddp": {"world_size": [1, 2, 4],
                                                                                     "comm_hook": ["none", "fp16"]}}])
        ).cells("cpu")
        if c.ddp.world_size == world and c.ddp.comm_hook == hook and c.seed == seed
    )  # fmt: skip
    return CellRecord.for_spec(
        spec, "ok", machine=CPU, throughput=throughput, comm_share=share, val_metric=metric,
        val_higher_is_better=True, step_time_ms_p50=1000 * 8 * world / throughput,
    )  # fmt: skip


def test_scaling_efficiency_hook_and_world_parity_come_from_the_records():
    records = [
        _record(1, "none", s, 100.0, 0.1, 0.90 + s / 100) for s in (0, 1)
    ] + [_record(2, "none", s, 150.0, 0.6, 0.90 + s / 100) for s in (0, 1)] + [
        _record(2, "fp16", s, 180.0, 0.5, 0.70 + s / 100) for s in (0, 1)  # faster, but loses accuracy
    ] + [_record(1, "fp16", s, 100.0, 0.1, 0.90) for s in (0, 1)]  # fmt: skip
    rows = {(r.world_size, r.comm_hook): r for r in summarize(records)}
    assert rows[(2, "none")].scaling_efficiency.value == pytest.approx(0.75)
    assert rows[(1, "none")].scaling_efficiency.value == pytest.approx(1.0)
    assert rows[(2, "none")].comm_share == pytest.approx(0.6)
    assert rows[(2, "none")].world_parity.verdict == "pass"
    assert rows[(2, "fp16")].hook_parity.verdict == "fail"
    assert rows[(2, "fp16")].hook_step_ratio.value == pytest.approx(150 / 180)
    assert rows[(2, "none")].hook_parity is None and rows[(2, "none")].variant == "eager, ddp x2"

    on_gpu = [r.model_copy(update={"machine": GPU}) for r in records]
    verdict, evidence = ddp_communication_bound(_evidence(on_gpu, GPU), THRESHOLDS)
    assert verdict == "supported" and "60%" in evidence and "parity fail" in evidence
    low = [r.model_copy(update={"comm_share": 0.2}) for r in on_gpu]
    assert ddp_communication_bound(_evidence(low, GPU), THRESHOLDS)[0] == "contradicted"
    noisy = [r.model_copy(update={"noisy": True}) for r in on_gpu]
    verdict, evidence = ddp_communication_bound(_evidence(noisy, GPU), THRESHOLDS)
    assert verdict == "not measured here" and "noisy" in evidence
    # On a CPU the ranks exchange gradients through memory: the shares are shown, not judged.
    verdict, evidence = ddp_communication_bound(_evidence(records), THRESHOLDS)
    assert verdict == "not measured here" and "gloo" in evidence and "60%" in evidence
    only_one = [r for r in on_gpu if r.world_size == 1]
    verdict, evidence = ddp_communication_bound(_evidence(only_one, GPU), THRESHOLDS)
    assert verdict == "not measured here" and "only world size 1" in evidence


def _evidence(records: list[CellRecord], machine: Machine = CPU) -> Evidence:
    rows = summarize(records)
    return Evidence(machine=machine, rows=rows, records=records, matmul_heavy=frozenset(),
                    answers=answers(rows, {machine.key: machine}))  # fmt: skip


# -- through the CLI: gloo at world size 2 ----------------------------------------------------------


@pytest.mark.slow  # ~40 s on a 2-core CPU: four cells, each starting its ranks' processes
def test_a_ddp_cell_runs_with_gloo_at_world_size_2_and_is_judged_against_world_size_1(tmp_path):
    """Each record carries a measured communication share; the report judges world size 2's parity
    against world size 1's (two seeds: pass/fail) and gives the article's DDP claim a verdict."""
    matrix = tmp_path / "ddp.yaml"
    ddp = {**MLP, "ddp": {"world_size": [1, 2]}}
    config = tiny_matrix(name="ddp", repeats=2, steps=30, precisions=["bf16"], workloads=[ddp])
    matrix.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    started = time.monotonic()
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    records = read_records(out)
    assert [(r["cell_id"], r["status"]) for r in records] == [
        ("mlp/bs8/seed0/bf16/ddp1", "ok"), ("mlp/bs8/seed0/bf16/ddp2", "ok"),
        ("mlp/bs8/seed1/bf16/ddp1", "ok"), ("mlp/bs8/seed1/bf16/ddp2", "ok"),
    ]  # fmt: skip
    for record in records:
        assert record["ddp_backend"] == "gloo" and record["comm_hook"] == "none" and record["rank_threads"] == 1
        assert len(record["rank_step_time_ms_p50"]) == record["world_size"]
        assert 0 < record["step_time_ms_no_sync_p50"] and 0 < record["step_time_ms_p50"]
        expected = 1 - record["step_time_ms_no_sync_p50"] / record["step_time_ms_p50"]
        assert record["comm_share_raw"] == pytest.approx(expected)
        assert record["comm_share"] == pytest.approx(max(0.0, expected))
    two = [r for r in records if r["world_size"] == 2]
    assert {r["throughput"] > 0 and r["batch_order_hash"] for r in two} != {False}
    report = json.loads((out / "report" / "report.json").read_text())
    rows = {r["world_size"]: r for r in report["rows"]}
    assert rows[2]["world_parity"]["verdict"] in ("pass", "fail") and rows[2]["scaling_efficiency"]["value"] > 0
    assert rows[1]["world_parity"] is None and rows[1]["scaling_efficiency"]["value"] == pytest.approx(1.0)
    claim = next(c for c in report["claims"] if c["claim"] == "ddp_communication_bound")
    assert claim["verdict"] == "not measured here" and "gloo" in claim["evidence"]  # a CPU: shown, not judged
    assert "world size 2" in claim["evidence"]
    assert "Data-parallel (DDP)" in (out / "report" / "report.md").read_text()
    shares = [round(r["comm_share"], 2) for r in records]
    print(f"4 DDP cells in {time.monotonic() - started:.0f}s; comm shares {shares}")


# -- MFU and out of memory: the whole world's peak, a rank's own figures ---------------------------


def _ddp_cell(world: int, **overrides):
    ddp = {**MLP, "ddp": {"world_size": [world]}}
    return Matrix.model_validate(tiny_matrix(precisions=["fp32"], workloads=[ddp], **overrides)).cells("cpu")[0]


def test_a_ddp_cells_mfu_is_a_fraction_of_every_ranks_peak(monkeypatch):
    """A DDP cell's TFLOP/s are its ranks' together, so MFU divides by world size x one GPU's peak.
    A CPU has no peak: the cell runs here as if on an H100 (its caps faked) with its measurement
    stood in for; only a GPU shows the ranks' own figures end to end (tests/e2e/test_gpu.py)."""
    h100 = "NVIDIA H100 80GB HBM3"
    peak = peak_tflops(h100, "fp32")
    assert peak  # the table knows this GPU, or there is nothing to divide by
    monkeypatch.setattr(cell_module, "probe", lambda device: cuda_caps(h100, (9, 0)))
    monkeypatch.setattr(launch, "measure_ddp", lambda spec, device, progress: {"tflops": 1.5 * peak})
    record = run_cell(_ddp_cell(2))
    assert record.status == "ok", record.reason
    assert record.peak_tflops == peak  # one GPU's, as the table has it
    assert record.mfu == pytest.approx(0.75)  # 1.5 peaks' worth from two GPUs; one GPU's peak says 1.5


# Loaded by the ranks only (PYTHONPATH reaches the processes the launcher starts): every rank's
# training step raises the error CUDA raises when a batch does not fit, and the rank's allocator
# reports figures that name the rank, as CUDA's would on a GPU. The launcher keeps its real ones:
# none on a CPU.
RANK_OOM = """
import os
import torch
import amp_suite.cell.loop
import amp_suite.instruments.memory


def step(self, inputs, targets):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated by the test)")


def memory_at_oom(device, error=None):
    rank = int(os.environ["RANK"])
    return {"peak_memory_mb": 1000.0 + rank, "peak_memory_reserved_mb": 2000.0 + rank,
            "peak_memory_kind": "cuda_max_allocated_until_oom", "device_memory_mb": 81559.0}


amp_suite.cell.loop.Trainer.step = step
amp_suite.instruments.memory.memory_at_oom = memory_at_oom
"""


def test_a_rank_out_of_memory_is_recorded_oom_with_the_ranks_memory_figures(tmp_path, monkeypatch):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(RANK_OOM)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "hooks"))  # for the ranks: this process has loaded its code
    record = run_cell(_ddp_cell(2, warmup_steps=1, steps=1))
    assert record.status == "oom", record.reason
    assert record.reason.startswith("out of memory at batch 8: ") and "CUDA out of memory" in record.reason
    rank = int(record.reason.split("rank ")[1].split(" of 2 failed")[0])  # the first rank to fail
    assert record.peak_memory_mb == 1000.0 + rank, record.reason  # that rank's allocator, not the launcher's
    assert record.peak_memory_reserved_mb == 2000.0 + rank
    assert record.peak_memory_kind == "cuda_max_allocated_until_oom" and record.device_memory_mb == 81559.0


# -- a rank that dies, and a run that is stopped ------------------------------------------------------


def _ranks_of(pid: int) -> dict[int, int]:
    """rank -> pid of the DDP rank processes started under `pid`."""
    parents, ranks = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    for child in found:
        try:
            if b"amp_suite.cell.ddp.rank" in Path(f"/proc/{child}/cmdline").read_bytes():
                env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
                ranks[int(next(v for v in env if v.startswith(b"RANK="))[5:])] = child
        except (OSError, StopIteration, ValueError):
            continue
    return ranks


def test_a_rank_killed_mid_cell_fails_the_cell_with_the_reason_and_stops_the_other_rank(tmp_path):
    ddp = {**MLP, "ddp": {"world_size": [2]}}
    after = {**MLP, "label": "after"}
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix(name="killed", steps=20000, precisions=["fp32"],
                                                 workloads=[ddp, {**after, "batch_sizes": [8]}])))  # fmt: skip
    out = tmp_path / "out"
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    ranks = wait_for(lambda: (found := _ranks_of(run.pid)) and len(found) == 2 and found, 120, "both ranks to start")
    time.sleep(3)  # into their training
    os.kill(ranks[1], signal.SIGKILL)  # as the out-of-memory killer would
    wait_for(lambda: not process_alive(ranks[0]), 30, "the launcher to stop rank 0")
    wait_for(lambda: (out / "logs" / "after_bs8_seed0_fp32.log").exists(), 60, "the next cell to start")
    run.send_signal(signal.SIGTERM)  # the plain cell would take minutes at 20,000 steps; its start is what counts
    run.communicate(timeout=60)
    records = read_records(out)
    assert records[0]["cell_id"] == "mlp/bs8/seed0/fp32/ddp2" and records[0]["status"] == "failed"
    assert "rank 1 was killed by SIGKILL" in records[0]["reason"], records[0]["reason"]
    assert not any(process_alive(pid) for pid in ranks.values())


def test_stopping_the_suite_stops_its_ranks(tmp_path):
    ddp = {**MLP, "ddp": {"world_size": [2]}}
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix(name="stopped", steps=20000, precisions=["fp32"], workloads=[ddp])))
    out = tmp_path / "out"
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    ranks = wait_for(lambda: (found := _ranks_of(run.pid)) and len(found) == 2 and found, 120, "both ranks to start")
    time.sleep(2)
    run.send_signal(signal.SIGINT)  # Ctrl-C
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGINT, stderr
    wait_for(lambda: not any(process_alive(pid) for pid in ranks.values()), 15, "the ranks to stop")
    # The stopped cell is kept as interrupted, never taken for a result (--resume runs it again).
    assert [r["status"] for r in read_records(out)] == ["interrupted"]
