"""The fused optimizer through `amp-suite run` on a CPU (fused AdamW has a CPU kernel): the MLP with
torch's default optimizer and with the fused one, in fp32 and fp16, each recorded as it ran, in
results.jsonl and in MLflow; fp16's GradScaler.step makes no host read with the fused one."""

from __future__ import annotations

import pytest
import yaml
from conftest import amp_suite, nested_runs, read_records, tiny_matrix


@pytest.mark.slow
def test_the_fused_optimizer_runs_in_fp32_and_fp16_and_is_recorded(tmp_path):
    mlp = {**tiny_matrix()["workloads"][0], "force": ["fp16"]}  # fp16 runs (emulated) on any CPU
    fused = {**mlp, "label": "mlp-fused", "fused_optimizer": True}
    # 4 warmup steps: host syncs are counted on the last one before the turns (side by side, half are
    # kept back), past the first step, whose optimizer state (its step counters) is not there yet.
    matrix = tiny_matrix(precisions=["fp32", "fp16"], workloads=[mlp, fused], warmup_steps=4)
    path = tmp_path / "fused.yaml"
    path.write_text(yaml.safe_dump(matrix))
    out = tmp_path / "out"
    done = amp_suite("run", "--matrix", str(path), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    records = {(r["workload"], r["precision"]): r for r in read_records(out)}
    assert set(records) == {(w, p) for w in ("mlp", "mlp-fused") for p in ("fp32", "fp16")}
    assert all(r["status"] == "ok" for r in records.values()), {k: r["reason"] for k, r in records.items()}
    for precision in ("fp32", "fp16"):
        assert records["mlp-fused", precision]["config"]["workload"]["fused_optimizer"] is True
        assert "fused_optimizer" not in records["mlp", precision]["config"]["workload"]  # torch's default
    # Counted on a CPU as the reads that would sync on a GPU: GradScaler's found_inf.item(), gone when fused.
    syncs = {key: record["host_syncs_per_step"] for key, record in records.items()}
    assert syncs == {("mlp", "fp32"): 0, ("mlp", "fp16"): 1, ("mlp-fused", "fp32"): 0, ("mlp-fused", "fp16"): 0}
    assert records["mlp-fused", "fp16"]["skipped_steps"] is not None

    _, children = nested_runs(out, "tiny")
    fused_param = {(run.data.params["workload"], run.data.params.get("precision")): run.data.params.get(
        "workload.fused_optimizer") for run in children}  # fmt: skip
    assert fused_param[("mlp-fused", "fp16")] == fused_param[("mlp-fused", "fp32")] == "True"
    assert fused_param[("mlp", "fp16")] is None and fused_param[("mlp", "fp32")] is None


@pytest.mark.gpu
def test_on_cuda_fp16_with_a_fused_optimizer_steps_without_a_host_sync(gpu):
    """CUDA's sync-debug mode counts GradScaler.step's found_inf.item() with torch's default AdamW,
    and nothing with the fused one, eager or under CUDA graphs (the default matrix's arms)."""
    import torch

    from amp_suite.cell.run import run_cell
    from amp_suite.config import Matrix

    if torch.cuda.get_device_capability() < (7, 0):
        pytest.skip("fp16 needs compute capability 7.0")
    mlp = tiny_matrix()["workloads"][0]
    fused = {**mlp, "label": "mlp-fused", "fused_optimizer": True, "compile": ["off", "reduce-overhead"]}
    # Alone (run_cell), syncs are counted on the last warmup step: a replay of the graphs, recorded on the 2nd.
    matrix = tiny_matrix(precisions=["fp16"], workloads=[mlp, fused], warmup_steps=8, steps=8)
    records = {cell.cell_id: run_cell(cell) for cell in Matrix.model_validate(matrix).cells("cuda")}
    assert all(r.status == "ok" for r in records.values()), {k: r.reason for k, r in records.items()}
    syncs = {cell_id: record.host_syncs_per_step for cell_id, record in records.items()}
    assert syncs["mlp/bs8/seed0/fp16"] == 1, syncs
    assert syncs["mlp-fused/bs8/seed0/fp16"] == 0, syncs
    assert syncs["mlp-fused/bs8/seed0/fp16/compile-reduce-overhead"] == 0, syncs
    assert all(record.skipped_steps is not None for record in records.values())
