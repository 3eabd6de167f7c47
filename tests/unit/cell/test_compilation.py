"""The compile and memory-layout axes: expansion, identity, baselines, skips, and real runs."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
import yaml
from conftest import EXPERIMENTS, amp_suite, read_records, tiny_matrix
from pydantic import ValidationError

from amp_suite.analysis.summary import summarize
from amp_suite.cell import compilation
from amp_suite.cell.pipeline import prepare
from amp_suite.cell.run import run_cell
from amp_suite.config import Matrix, load_matrix
from amp_suite.records.results import CellRecord, StoredRecord

MLP = tiny_matrix()["workloads"][0]
RESNET = {
    "workload": "resnet", "arch": "resnet18", "image_size": 32, "num_classes": 10, "batch_sizes": [8],
    "samples": 64, "data": {"source": "synthetic", "val_samples": 16},
}  # fmt: skip


def matrix(**overrides) -> Matrix:
    return Matrix.model_validate(tiny_matrix(precisions=["fp32", "bf16"], **overrides))


def test_compile_and_layout_expand_like_precision_and_name_the_cell():
    axes = {"compile": [False, "reduce-overhead"], "channels_last": [False, True]}
    cells = matrix(**axes, workloads=[MLP, RESNET]).cells("cpu")
    by_workload = {}
    for cell in cells:
        by_workload.setdefault(cell.workload.name, []).append(cell)
    # The layout axis applies to image workloads only: the MLP has one layout.
    assert len(by_workload["mlp"]) == 2 * 1 * 2 and len(by_workload["resnet"]) == 2 * 2 * 2
    ids = {cell.cell_id for cell in cells}
    assert "mlp/bs8/seed0/fp32" in ids and "mlp/bs8/seed0/bf16/compile-reduce-overhead" in ids
    assert "resnet/bs8/seed0/bf16/compile-reduce-overhead/nhwc" in ids and "resnet/bs8/seed0/fp32/nhwc" in ids
    assert len({cell.config_hash for cell in cells}) == len(cells)
    # Every precision of one (compile, layout) runs back to back, so its comparison is adjacent.
    assert [c.precision for c in by_workload["resnet"][:2]] == ["fp32", "bf16"]
    assert by_workload["resnet"][0].compile == by_workload["resnet"][1].compile == "off"


def test_a_workload_can_sweep_its_own_axes_and_yaml_booleans_mean_off_and_default():
    resnet = {**RESNET, "channels_last": True, "compile": True}  # single values: one-value lists
    cells = matrix(compile=[False], workloads=[MLP, resnet]).cells("cpu")
    assert {(c.workload.name, c.compile, c.channels_last) for c in cells} == {
        ("mlp", "off", False),
        ("resnet", "default", True),
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"compile": ["off", False]}, "compile must not repeat"),
        ({"compile": ["fastest"]}, "'reduce-overhead'"),
        ({"channels_last": []}, "at least 1 item"),
        ({"workloads": [{**MLP, "channels_last": True}]}, "channels_last applies to image workloads"),
    ],
)
def test_bad_axis_values_are_refused_with_the_reason(overrides, message):
    with pytest.raises(ValidationError, match=message):
        matrix(**overrides)


def test_a_bad_axis_value_is_one_line_and_exit_2_from_the_cli(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(compile=["fastest"])))
    done = amp_suite("run", "--matrix", str(path), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "compile" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "results.jsonl").exists()


def _record(cell, throughput: float) -> CellRecord:
    return CellRecord.for_spec(cell, "ok", throughput=throughput, val_metric=0.9, val_metric_name="val_accuracy")


def test_each_compile_mode_and_layout_has_its_own_baseline():
    cells = matrix(compile=[False, True], workloads=[RESNET], channels_last=[False, True]).cells("cpu")
    rate = {("off", False): 100.0, ("off", True): 120.0, ("default", False): 200.0, ("default", True): 300.0}
    bf16_gain = 1.5
    records = [
        _record(c, rate[c.compile, c.channels_last] * (bf16_gain if c.precision == "bf16" else 1.0)) for c in cells
    ]
    rows = summarize(records)
    assert len({row.setup for row in rows}) == 4
    for row in rows:
        expected = bf16_gain if row.precision == "bf16" else 1.0
        assert row.speedup.value == pytest.approx(expected), row  # compiled AMP against compiled fp32, not eager
    variants = {row.variant for row in rows}
    assert variants == {"eager", "eager, channels_last", "compiled (default)", "compiled (default), channels_last"}


def test_a_record_from_before_the_layout_axis_keeps_its_layout_and_its_own_setup():
    cell = matrix(workloads=[RESNET]).cells("cpu")[0]
    old = _record(cell, 100.0).model_dump(mode="json")
    for key in ("compile", "channels_last"):
        old.pop(key)
        old["config"].pop(key)
    nhwc = {**old, "config": {**old["config"], "workload": {**old["config"]["workload"], "channels_last": True}}}
    nchw = {**old, "config": {**old["config"], "workload": {**old["config"]["workload"], "channels_last": False}}}
    read = [StoredRecord.model_validate(nhwc), StoredRecord.model_validate(nchw)]
    assert [r.channels_last for r in read] == [True, False] and [r.compile for r in read] == ["off", "off"]
    assert len({row.setup for row in summarize(read)}) == 2  # never pooled into one comparison


def test_channels_last_converts_the_model_and_the_device_data_once():
    cell = matrix(workloads=[RESNET], channels_last=[True]).cells("cpu")[0]
    session = prepare(cell, torch.device("cpu"))
    assert session.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    inputs, _ = session.batches.peek()
    assert inputs.is_contiguous(memory_format=torch.channels_last)  # batches cut from the data keep it


def test_compile_without_a_cpp_compiler_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setenv("CXX", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    reason = compilation.unsupported_reason(torch.device("cpu"), "default")
    assert reason is not None and "C++ compiler" in reason
    assert compilation.unsupported_reason(torch.device("cpu"), "off") is None
    cell = matrix(compile=["default"]).cells("cpu")[0]
    record = run_cell(cell.model_copy(update={"force": True}))  # --force can't make it possible
    assert record.status == "skipped" and "C++ compiler" in record.reason


@pytest.mark.slow
def test_compiled_cells_without_a_cpp_compiler_are_skipped_through_the_cli_and_eager_ones_run(tmp_path):
    """With no C++ compiler on PATH the compiled cells are skipped with the reason, not failed, and
    the eager cells beside them run. (Compiled cells that run, with their mode and warmup: the
    smoke matrix, tests/e2e/test_smoke.py; each compile costs tens of seconds on this CPU.)"""
    no_compiler = {"PATH": os.path.dirname(os.sys.executable) + ":/nonexistent", "CXX": ""}
    if any(os.access(os.path.join(os.path.dirname(os.sys.executable), name), os.X_OK) for name in ("g++", "c++")):
        pytest.skip("a C++ compiler sits next to the Python interpreter")
    path = tmp_path / "compiled.yaml"
    path.write_text(yaml.safe_dump(tiny_matrix(precisions=["fp32"], compile=[False, True])))
    out = tmp_path / "no-compiler"
    done = amp_suite("run", "--matrix", str(path), "--out", str(out), "--device", "cpu", cwd=tmp_path, env=no_compiler)
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = {r["cell_id"]: (r["status"], r["reason"]) for r in read_records(out)}
    assert statuses["mlp/bs8/seed0/fp32"][0] == "ok"
    status, reason = statuses["mlp/bs8/seed0/fp32/compile-default"]
    assert status == "skipped" and "C++ compiler" in reason


TRANSFORMER = {
    "workload": "transformer", "n_layer": 1, "n_embd": 32, "n_head": 2, "seq_len": 16, "vocab_size": 64,
    "batch_sizes": [4], "samples": 32, "data": {"source": "synthetic", "val_samples": 8},
}  # fmt: skip


class GraphPoolOutput:
    """The workload's loss as a CUDA graph hands it out: every replay writes its output into the same
    static tensor of the graph's pool (what cudagraph trees do; a CPU never replays graphs)."""

    def __init__(self, workload) -> None:
        self.workload, self.pool = workload, torch.zeros(())

    def loss(self, model, inputs, targets):
        # A fresh alias of the same memory each step, so autograd sees this step's graph only.
        return self.pool.detach().copy_(self.workload.loss(model, inputs, targets))


def test_a_compiled_transformers_loss_is_kept_across_cuda_graph_replays():
    """The transformer's loss is an output of its compiled graph: under CUDA graphs the next replay
    overwrites it, so the loss curve must hold copies, not views of the pool."""
    compiled = matrix(workloads=[TRANSFORMER], compile=["reduce-overhead"]).cells("cpu")[0]
    session = prepare(compiled, torch.device("cpu"))  # torch.compile is lazy: nothing compiles here
    replays = dataclasses.replace(session.trainer, model=session.model, workload=GraphPoolOutput(session.workload))
    losses, _ = replays.run(session.batches, 3)

    eager = prepare(compiled.model_copy(update={"compile": "off"}), torch.device("cpu"))
    expected, _ = eager.trainer.run(eager.batches, 3)
    assert torch.equal(losses, expected) and len(set(losses.tolist())) == 3  # each step's own loss


def test_shipped_matrices_warm_up_past_cuda_graphs_recording():
    """A compiled function is warmed up on its first call under CUDA graph trees, recorded on its
    second and replayed from its third: no shipped matrix times a step before its graphs replay."""
    graphed = {}
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        loaded = load_matrix(path)
        modes = {mode for w in loaded.workloads for mode in (w.compile or loaded.compile)}
        if any(compilation.uses_cuda_graphs(mode) for mode in modes):
            graphed[path.stem] = loaded.warmup_steps
    assert {"default", "gpu-check-compile"} <= set(graphed)
    assert all(steps >= compilation.CALLS_BEFORE_REPLAY for steps in graphed.values()), graphed


@pytest.mark.parametrize("mode, copies", [("off", False), ("default", False), ("reduce-overhead", True),
                                          ("max-autotune", True), ("max-autotune-no-cudagraphs", False)])  # fmt: skip
def test_only_modes_that_replay_cuda_graphs_pay_for_a_copy_of_the_loss(mode, copies):
    loss = torch.ones(())
    kept = compilation.kept_output(mode)(loss)
    assert (kept.data_ptr() != loss.data_ptr()) is copies and not kept.requires_grad


def test_compile_on_a_gpu_needs_a_c_compiler_and_python_headers(monkeypatch, tmp_path):
    """Triton builds its kernel launcher with a C compiler and Python.h on the first compiled call:
    without them the cell is skipped with the reason instead of failing in its warmup."""
    import sysconfig

    import torch.utils._triton

    monkeypatch.setattr(torch.utils._triton, "has_triton", lambda: True)  # as on a GPU with Triton
    gpu = torch.device("cuda")
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = compilation.unsupported_reason(gpu, "reduce-overhead")
    assert reason is not None and "C compiler" in reason and "gcc" in reason

    (tmp_path / "gcc").write_text("#!/bin/sh\n")
    (tmp_path / "gcc").chmod(0o755)
    assert compilation.unsupported_reason(gpu, "reduce-overhead") is None  # Python.h is where build.py looks
    paths = sysconfig.get_paths()
    monkeypatch.setattr(sysconfig, "get_paths", lambda **_: paths | {"include": str(tmp_path / "include")})
    reason = compilation.unsupported_reason(gpu, "default")
    assert reason is not None and "Python's C headers" in reason and "python3-dev" in reason
    assert compilation.unsupported_reason(gpu, "off") is None
