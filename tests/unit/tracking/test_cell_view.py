"""What a reviewer meets in MLflow's UI, in-process against a real SQLite store: the few charted
metrics, each cell's verdict line as its description, no empty tags, a parent whose description
opens on the answer, no empty Default experiment, and links that open model training mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import tiny_matrix

from amp_suite.analysis.answer import answers
from amp_suite.analysis.summary import group_key, summarize
from amp_suite.config import Matrix
from amp_suite.records.invocations import InvocationStarted
from amp_suite.records.results import CellRecord
from amp_suite.records.rundir import RunDirectory
from amp_suite.tracking import cell_view
from amp_suite.tracking.mlflow_store import MLFLOW_NOTE, PARENT, MlflowStore, overview_lines
from amp_suite.tracking.sync import SyncReport, sync_run_dir
from amp_suite.tracking.uri import UI_VIEW_KEY, ui_link

MATRIX = Matrix.model_validate(tiny_matrix(precisions=["fp32", "bf16", "fp16"]))
MEASURED = {"peak_memory_mb": 100.0, "host_cpu_ms_per_step": 1.5, "flops_per_step": 1000, "val_loss": 0.3}


@pytest.fixture
def synced(tmp_path):
    """A finished invocation (fp32 and bf16 ran, fp16 was skipped) synced into a new SQLite store."""
    directory = RunDirectory(tmp_path / "out")
    directory.path.mkdir()
    fp32_spec, bf16_spec, fp16_spec = MATRIX.cells("cpu")
    started = InvocationStarted.now("review", "name: tiny\n", MATRIX.model_dump(mode="json"), 1, [])
    common = {"val_metric_name": "val_accuracy", "val_higher_is_better": True, "invocation_id": started.invocation_id}
    records = [
        CellRecord.for_spec(fp32_spec, "ok", throughput=100.0, val_metric=0.9, record_id="a" * 16,
                            loss_curve=[2.0, 1.5], **MEASURED, **common),
        CellRecord.for_spec(bf16_spec, "ok", throughput=150.0, val_metric=0.9, record_id="b" * 16,
                            loss_curve=[2.0, 1.4], **(MEASURED | {"peak_memory_mb": 60.0}), **common),
        CellRecord.for_spec(fp16_spec, "skipped", "no fp16 units here", record_id="c" * 16, **common),
    ]  # fmt: skip
    directory.invocations.start(started)
    for record in records:
        directory.results.append(record)
    directory.invocations.end(started.invocation_id, "finished")
    store = MlflowStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    sync_run_dir(directory, store, SyncReport())
    experiment = store.client.get_experiment_by_name("review")
    runs = store.runs_of(experiment.experiment_id, started.invocation_id)
    return store, experiment, records, runs


def _children(runs):
    return {run.data.params["precision"]: run for run in runs if PARENT in run.data.tags}


def test_a_cell_charts_only_what_people_compare_and_keeps_the_rest_in_one_file(synced, tmp_path):
    store, _, records, runs = synced
    children = _children(runs)
    assert set(children) == {"fp32", "bf16"}  # the skipped cell's run is set aside
    charted = {"throughput_samples_per_s", "peak_memory_mb", "val_accuracy", "train_loss", "speedup"}
    for precision, child in children.items():
        assert set(child.data.metrics) == charted, precision
        assert set(child.data.metrics) <= cell_view.charted_names(records[0])
    bf16 = children["bf16"]
    assert bf16.data.metrics["speedup"] == 1.5 and bf16.data.metrics["throughput_samples_per_s"] == 150.0
    path = store.client.download_artifacts(bf16.info.run_id, cell_view.DIAGNOSTICS, str(tmp_path))
    diagnostics = json.loads(Path(path).read_text())
    assert diagnostics["host_cpu_ms_per_step"] == 1.5 and diagnostics["flops_per_step"] == 1000
    assert diagnostics["val_loss"] == 0.3 and diagnostics["memory_ratio"] == pytest.approx(0.6)
    assert not set(diagnostics) & charted


def test_a_cells_description_is_its_verdict_line_and_no_tag_is_empty(synced):
    _, _, records, runs = synced
    summary = summarize(records, MATRIX.parity)
    rows = {(row.machine, row.setup, row.precision): row for row in summary}
    children = _children(runs)
    for record in records[:2]:
        note = children[record.precision].data.tags[MLFLOW_NOTE]
        assert note == cell_view.verdict_line(record, rows[group_key(record)])
    assert children["bf16"].data.tags[MLFLOW_NOTE].startswith("bf16 · speedup vs fp32 1.50x · parity ")
    assert "peak memory 60 MB (0.60x fp32's)" in children["bf16"].data.tags[MLFLOW_NOTE]
    for run in runs:
        assert all(value != "" for value in run.data.tags.values()), run.data.tags
        assert "reason" not in run.data.tags or run.data.tags["status"] != "ok"


def test_the_parents_description_opens_on_the_answer(synced):
    _, _, records, runs = synced
    (parent,) = [run for run in runs if PARENT not in run.data.tags]
    summary = summarize(records, MATRIX.parity)
    found = answers(summary, {r.machine.key: r.machine for r in records if r.machine})
    note = parent.data.tags[MLFLOW_NOTE]
    assert note.splitlines()[0] == overview_lines(found)[0]
    assert note.startswith("**mlp** (batch 8, eager): ")
    assert not parent.data.metrics  # its counts are tags: the experiment's charts compare cells
    assert (parent.data.tags["cells_ok"], parent.data.tags["cells_skipped"]) == ("2", "1")


def test_a_new_store_holds_only_our_experiments_in_model_training_mode(synced, tmp_path):
    store, experiment, _, _ = synced
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    # The shared view the experiment's link opens: each comparison's precisions side by side, all charted.
    view = json.loads(experiment.tags[f"mlflow.sharedViewState.{UI_VIEW_KEY}"])
    assert view == cell_view.runs_view({"throughput_samples_per_s", "peak_memory_mb"})
    assert view["runsHiddenMode"] == "SHOW_ALL"
    assert view["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "mode"}]
    assert [e.name for e in store.client.search_experiments()] == ["review"]  # no empty Default beside it
    again = MlflowStore(f"sqlite:///{tmp_path / 'mlflow.db'}")  # opened again: MLflow does not make it anew
    assert [e.name for e in again.client.search_experiments()] == ["review"]


def test_links_name_the_ui_mode_that_mlflow_reads_from_the_url():
    assert ui_link("http://127.0.0.1:5000/", "3", "abc") == (
        "http://127.0.0.1:5000/#/experiments/3/runs/abc?workflowType=machine_learning"
    )
    assert ui_link("http://h:1", "3") == (
        f"http://h:1/#/experiments/3/runs?viewStateShareKey={UI_VIEW_KEY}&workflowType=machine_learning"
    )
    assert ui_link("http://h:1").endswith("/#/experiments?workflowType=machine_learning")


def test_the_installed_mlflow_ui_still_takes_its_mode_from_the_url_or_the_browser():
    """The reason the links carry workflowType: if MLflow changes how its UI picks a mode, this says so."""
    import mlflow

    bundles = list((Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js").glob("main.*.js"))
    if not bundles:
        pytest.skip("this MLflow has no UI bundle (mlflow-skinny)")
    text = bundles[0].read_text(errors="replace")
    assert 'key:"mlflow.workflowType"' in text and '.get("workflowType")' in text
    assert 'e.GENAI="genai",e.MACHINE_LEARNING="machine_learning"' in text
    assert '"mlflow.sharedViewState."' in text and '"viewStateShareKey"' in text  # the shared view's tag and key


def test_a_matrix_named_default_gets_the_retired_default_experiment_back(tmp_path):
    store = MlflowStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert store.experiment_id("Default", create=False) is None  # retired while empty: not ours to log into
    assert store.experiment_id("Default") == "0"
    default = store.client.get_experiment("0")
    assert default.lifecycle_stage == "active" and default.tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_saved_view_groups_each_precision_apart_and_machines_where_several_meet():
    one = cell_view.runs_view({"throughput_images_per_s", "throughput_tokens_per_s", "train_loss"})
    keys = one["groupBy"]["groupByKeys"]
    assert keys == [{"mode": "tag", "groupByData": "mode"}]  # one precision of one comparison
    several = cell_view.runs_view(several_machines=True)["groupBy"]["groupByKeys"]
    assert several == [*keys, {"mode": "tag", "groupByData": "machine"}]
    assert one["selectedColumns"] == [
        "attributes.`Description`", "params.`precision`", "tags.`speedup`", "metrics.`throughput_images_per_s`",
        "metrics.`throughput_tokens_per_s`", "metrics.`peak_memory_mb`", "tags.`parity`",
    ]  # fmt: skip
    assert one["columnOrder"][0] == "attributes.`Run Name`" and one["columnOrder"][-1] == "attributes.`Description`"
    # The parents (no mode tag) are MLflow's ungrouped runs, which it folds unless told otherwise.
    assert one["groupsExpanded"] == {"tag.mode": True}
    assert (one["orderByKey"], one["orderByAsc"]) == ("tags.`comparison`", True)  # a comparison's modes together


def test_a_cells_mode_is_its_run_name_without_the_seed(synced):
    _, _, _, runs = synced
    children = _children(runs)
    assert {run.data.tags["comparison"] for run in children.values()} == {"mlp · bs8"}
    assert children["bf16"].data.tags["mode"] == "bf16 · mlp · bs8"  # precision first: MLflow cuts a long label
    assert cell_view.view_tags("resnet/bs16/seed3/bf16/compile-default/nhwc") == {
        "comparison": "resnet · bs16 · compile-default · nhwc",
        "mode": "bf16 · resnet · bs16 · compile-default · nhwc",
    }


def test_an_experiment_an_earlier_version_made_gets_the_view_and_its_tags(synced, tmp_path):
    store, experiment, _, runs = synced
    by_workload = {
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "param", "groupByData": "workload"}]}
    }
    tag = f"mlflow.sharedViewState.{UI_VIEW_KEY}"
    store.client.set_experiment_tag(experiment.experiment_id, tag, json.dumps(by_workload))
    bf16 = _children(runs)["bf16"].info.run_id
    store.client.delete_tag(bf16, "mode")  # a run logged before the view grouped by it
    MlflowStore(f"sqlite:///{tmp_path / 'mlflow.db'}").experiment_id("review")  # a run or sync opens it
    view = json.loads(store.client.get_experiment(experiment.experiment_id).tags[tag])
    assert view == cell_view.runs_view({"throughput_samples_per_s"})
    assert store.client.get_run(bf16).data.tags["mode"] == "bf16 · mlp · bs8"
