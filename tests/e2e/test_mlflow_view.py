"""The MLflow view a reviewer opens, from a store the CLI wrote: the saved view never averages two
precisions together (in a group's row or its chart), its columns are keys the runs carry, and the
link `amp-suite ui` prints opens that view on the experiment."""

from __future__ import annotations

import json
import re
import signal
import threading
from pathlib import Path

import pytest
from conftest import amp_suite, free_port, start_amp_suite, tiny_matrix

from amp_suite.config import Matrix
from amp_suite.records.invocations import InvocationStarted
from amp_suite.records.results import CellRecord
from amp_suite.records.rundir import RunDirectory

MATRIX = Matrix.model_validate(tiny_matrix(precisions=["fp32", "bf16"], repeats=2, workloads=[
    {"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": [8, 16], "samples": 64},
]))  # fmt: skip
VIEW_TAG = "mlflow.sharedViewState.amp-suite"


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """A finished invocation, two batch sizes x two precisions x two seeds, synced by the CLI into
    the folder's own store."""
    out = tmp_path_factory.mktemp("view") / "out"
    directory = RunDirectory(out)
    out.mkdir()
    started = InvocationStarted.now("view", "name: tiny\n", MATRIX.model_dump(mode="json"), 1, [])
    directory.invocations.start(started)
    for index, spec in enumerate(MATRIX.cells("cpu")):
        speed = 150.0 if spec.precision == "bf16" else 100.0
        directory.results.append(CellRecord.for_spec(
            spec, "ok", throughput=speed + spec.seed, val_metric=0.9, peak_memory_mb=100.0, loss_curve=[2.0, 1.5],
            val_metric_name="val_accuracy", val_higher_is_better=True, invocation_id=started.invocation_id,
            record_id=f"{index:016x}",
        ))  # fmt: skip
    directory.invocations.end(started.invocation_id, "finished")
    done = amp_suite("sync", str(out), cwd=out.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _store(out: Path):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    (experiment,) = client.search_experiments()
    return client, experiment, client.search_runs([experiment.experiment_id])


def _value(run, key: dict[str, str]) -> str | None:
    """What MLflow's UI groups a run by (its experimentPage.group-row-utils: a tag's or a param's value)."""
    values = run.data.tags if key["mode"] == "tag" else run.data.params
    return values.get(key["groupByData"]) or None


def mixed_groups(view: dict, runs) -> list[set[str]]:
    """The precisions of each group of the view that holds more than one: MLflow shows a group's
    aggregate in its table row and charts it as one bar or line, so such a group is an average
    across modes. Cells the view leaves ungrouped are counted as one group too (MLflow aggregates
    its "Additional runs" row the same way)."""
    group_by = view.get("groupBy")
    if not group_by:
        return []
    groups: dict[tuple, set[str]] = {}
    for run in runs:
        if "precision" not in run.data.params:  # a parent: no metrics to average
            continue
        values = tuple(_value(run, key) for key in group_by["groupByKeys"])
        groups.setdefault(values if any(values) else ("ungrouped",), set()).add(run.data.params["precision"])
    return [precisions for precisions in groups.values() if len(precisions) > 1]


def test_the_saved_view_never_averages_precisions_together(synced):
    _, experiment, runs = _store(synced)
    view = json.loads(experiment.tags[VIEW_TAG])
    assert view["groupBy"]["groupByKeys"], view  # grouped: else MLflow folds the cells behind their parent
    assert mixed_groups(view, runs) == [], view["groupBy"]
    # The view earlier versions wrote, one group per workload, is what this catches.
    by_workload = {
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "param", "groupByData": "workload"}]}
    }
    assert mixed_groups(by_workload, runs) == [{"fp32", "bf16"}]
    # Each group is one comparison's mode: its seeds, each with the summary's speedup.
    cells = [run for run in runs if "precision" in run.data.params]
    groups = {tuple(_value(run, key) for key in view["groupBy"]["groupByKeys"]) for run in cells}
    assert len(groups) == 4 and all(all(values) for values in groups)
    assert view["runsHiddenMode"] == "SHOW_ALL"  # every group charted, not the first 10


def test_the_saved_view_shows_the_verdicts_columns(synced):
    _, experiment, runs = _store(synced)
    view = json.loads(experiment.tags[VIEW_TAG])
    columns = view["selectedColumns"]
    assert columns[:3] == ["attributes.`Description`", "params.`precision`", "tags.`speedup`"]
    assert {"metrics.`throughput_samples_per_s`", "metrics.`peak_memory_mb`", "tags.`parity`"} <= set(columns)
    carried = {
        f"{kind}.`{key}`"
        for run in runs
        for kind, keys in (("metrics", run.data.metrics), ("params", run.data.params), ("tags", run.data.tags))
        for key in keys
    }
    assert set(columns) - {"attributes.`Description`"} <= carried  # each a key the runs carry: no empty column
    bf16 = next(run for run in runs if run.data.params.get("precision") == "bf16")
    assert re.fullmatch(r"1\.\d\dx( \[\d\.\d\d, \d\.\d\d\])?", bf16.data.tags["speedup"])  # the interval, where one


def test_ui_prints_a_link_to_the_experiments_saved_view(synced):
    _, experiment, _ = _store(synced)
    port = free_port()
    ui = start_amp_suite("ui", "--out", str(synced), "--port", str(port), cwd=synced.parent)
    lines: list[str] = []

    def read_until_announced() -> None:
        while (line := ui.stdout.readline()) and not line.startswith("MLflow UI on"):
            lines.append(line)
        lines.append(line)

    reader = threading.Thread(target=read_until_announced, daemon=True)
    reader.start()
    reader.join(timeout=120)
    ui.send_signal(signal.SIGINT)
    ui.communicate(timeout=60)
    link = f"http://127.0.0.1:{port}/#/experiments/{experiment.experiment_id}/runs?viewStateShareKey=amp-suite&"
    assert lines and lines[-1].startswith(f"MLflow UI on {link}"), lines
    assert "workflowType=machine_learning" in lines[-1] and "experiment view" in lines[-1]
