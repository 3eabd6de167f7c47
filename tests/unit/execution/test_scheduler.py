"""The multi-GPU scheduler (`amp-suite run --gpus`). This machine has no GPU: the scheduler runs
real cells in real worker processes on the CPU, given stand-in device names; each cell reports
the CUDA_VISIBLE_DEVICES it saw, which is all a GPU cell needs to run on the GPU it was given."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import psutil
import pytest
import yaml
from conftest import amp_suite, runs_in, tiny_matrix

from amp_suite.config import ConfigError, Matrix
from amp_suite.execution.executors import OnThisBox
from amp_suite.execution.runner import MatrixRunner
from amp_suite.execution.scheduler import DevicePool, GpuSelection, threads_per_cell, visible_index
from amp_suite.hardware.backends.cpu import CpuBackend
from amp_suite.hardware.backends.cuda import CudaBackend
from amp_suite.records.rundir import RunDirectory
from amp_suite.tracking import FailSafeTracker
from amp_suite.tracking.mlflow_store import MlflowStore
from amp_suite.tracking.mlflow_tracker import MlflowTracker

STAND_INS = ["0", "1", "2"]


class RecordingDisplay:
    """What the terminal would show, kept for the assertions (the runner calls it from one thread)."""

    def __init__(self) -> None:
        self.started: dict[str, tuple[str, ...] | None] = {}
        self.finished: list[str] = []
        self.threads: set[str] = set()
        self.warnings: list[str] = []

    def begin(self, to_run, reused):
        pass

    def warn(self, message):
        self.warnings.append(message)

    def start_cell(self, spec, where=None):
        assert spec.cell_id not in self.started, "a cell started twice"
        self.started[spec.cell_id] = tuple(where.removeprefix("gpu ").split(",")) if where else None
        self.threads.add(threading.current_thread().name)

    def cell_progress(self, spec, phase, done, total):
        self.threads.add(threading.current_thread().name)

    def finish_cell(self, record):
        self.finished.append(record.cell_id)
        self.threads.add(threading.current_thread().name)


@pytest.fixture(autouse=True)
def cpu_cells_stand_in_for_gpu_cells(monkeypatch):
    """The cells are CPU cells on stand-in GPUs: their backend names CUDA's variable, as a GPU's does,
    so the child's CUDA_VISIBLE_DEVICES shows where it was placed."""
    monkeypatch.setattr(CpuBackend, "visible_devices", CudaBackend.visible_devices)


def run_matrix(tmp_path, matrix: Matrix, devices):
    out = tmp_path / "out"
    directory, display = RunDirectory(out), RecordingDisplay()
    out.mkdir(parents=True)
    tracker = FailSafeTracker(MlflowTracker(MlflowStore(f"sqlite:///{out}/mlflow.db", out / "artifacts")), print, "")
    runner = MatrixRunner(matrix, matrix.cells("cpu"), directory, tracker, display, executor=OnThisBox(devices))
    conclusion, _ = runner.run(matrix.name, "")
    return list(conclusion.records), directory, display


@pytest.mark.slow
def test_each_cell_runs_once_on_its_device_and_its_figures_are_those_it_gets_alone(tmp_path):
    matrix = Matrix.model_validate(tiny_matrix(precisions=["fp32", "bf16"], repeats=3, steps=40))
    records, directory, display = run_matrix(tmp_path / "shared", matrix, STAND_INS)

    cells = [spec.cell_id for spec in matrix.cells("cpu")]
    stored, unreadable = directory.results.read()
    assert unreadable == 0
    assert sorted(r.cell_id for r in stored) == sorted(cells)  # each exactly once
    assert [r.cell_id for r in records] == cells  # returned in matrix order, whatever order they ended in
    assert {r.status for r in stored} == {"ok"}
    for record in stored:
        given = display.started[record.cell_id]
        assert given is not None and len(given) == 1
        assert record.environment["cuda_visible_devices"] == given[0]  # what the cell's process saw
        assert record.environment["torch_threads"] == max(1, psutil.cpu_count() // len(STAND_INS))
    assert {display.started[c][0] for c in cells} == set(STAND_INS)  # every device was used
    assert display.threads == {threading.main_thread().name}  # the display is only called from here
    assert _most_at_once(stored) >= 2  # they did run side by side

    alone, _, _ = run_matrix(tmp_path / "alone", matrix, None)
    for one, other in zip(alone, records, strict=True):  # same seed, same data order: the same training
        assert one.cell_id == other.cell_id and one.batch_order_hash == other.batch_order_hash
        # To the last bits: a cell alone has 2 threads, beside two others 1, and a sum split over
        # another number of threads may round differently (seen: 1 ulp in fp32 on an AMD EPYC).
        assert one.loss_curve == pytest.approx(other.loss_curve, rel=1e-5, abs=0)
        assert one.val_metric == pytest.approx(other.val_metric, rel=1e-5, abs=0)


@pytest.mark.slow
def test_a_stopped_run_stops_every_running_cell_and_records_them_interrupted(tmp_path):
    matrix = Matrix.model_validate(tiny_matrix(precisions=["fp32", "bf16"], repeats=3, steps=200_000))
    out = tmp_path / "out"
    out.mkdir()
    directory, display = RunDirectory(out), RecordingDisplay()
    stop_after, measuring, raised_at = time.monotonic() + 8, set(), []

    def progress_then_stop(spec, phase, done, total):
        """Once every cell is measuring (a slow start can keep one preparing past 8 s), or at 60 s."""
        if phase == "measure":
            measuring.add(spec.cell_id)
        now = time.monotonic()
        if phase == "measure" and now > stop_after and (len(measuring) == len(STAND_INS) or now > stop_after + 52):
            raised_at.append(now)
            raise KeyboardInterrupt  # as a signal would, in the main thread

    display.cell_progress = progress_then_stop
    tracker = FailSafeTracker(MlflowTracker(MlflowStore(f"sqlite:///{out}/mlflow.db", out / "artifacts")), print, "")
    runner = MatrixRunner(matrix, matrix.cells("cpu"), directory, tracker, display, executor=OnThisBox(STAND_INS))
    with pytest.raises(KeyboardInterrupt):
        runner.run(matrix.name, "")
    assert time.monotonic() - raised_at[0] < 22  # every cell stopped, its record written
    assert len(display.started) == len(STAND_INS)  # three were running, none had finished
    records, unreadable = directory.results.read()  # each kept, as interrupted: none is taken for a result
    assert unreadable == 0 and len(records) == len(STAND_INS)
    stopped = [(r.status, r.reason) for r in records]
    assert all(status == "interrupted" and why.startswith("interrupted by SIGINT in measure")
               for status, why in stopped), stopped  # fmt: skip
    assert _cell_processes() == []


def write_matrix(tmp_path, matrix: dict):
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


def _cell_processes() -> list[psutil.Process]:
    """Our descendants other than multiprocessing's forkserver and resource tracker."""
    deadline = time.monotonic() + 10
    while True:
        found = [
            child
            for child in psutil.Process().children(recursive=True)
            if not any(helper in " ".join(child.cmdline()) for helper in ("forkserver", "resource_tracker"))
        ]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _most_at_once(records) -> int:
    starts = [datetime.fromisoformat(r.started_at).timestamp() for r in records]
    spans = [(start, start + r.duration_s) for start, r in zip(starts, records, strict=True)]
    return max(sum(start <= begin < end for start, end in spans) for begin, _ in spans)


# -- the pieces ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "visible", "devices"),
    [("all", 3, ["0", "1", "2"]), ("2", 3, ["0", "1"]), ("2,0", 3, ["2", "0"]), (" 1 ", 4, ["0"]), ("2,", 3, ["2"])],
)
def test_gpus_names_the_devices(text, visible, devices):
    assert GpuSelection.parse(text).resolve(visible) == devices


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "give all"), ("two", "give all"), ("0,,1", "give all"), ("-1", "give all"), ("0", "give --gpus 0, "),
     ("1,1", "repeats"), ("99999", "give all"), (",", "give all")],
)  # fmt: skip
def test_a_bad_gpus_value_says_what_to_give(text, message):
    with pytest.raises(ConfigError, match=message):
        GpuSelection.parse(text)


@pytest.mark.parametrize(("text", "message"), [("4", "only 2 GPU"), ("0,2", "no GPU 2"), ("all", None)])
def test_gpus_beyond_what_is_visible_is_refused(text, message):
    assert GpuSelection.parse(text).resolve(2) if message is None else True
    if message:
        with pytest.raises(ConfigError, match=message):
            GpuSelection.parse(text).resolve(2)
    with pytest.raises(ConfigError, match="no CUDA GPU is visible"):
        GpuSelection.parse(text).resolve(0)


def test_indexes_are_passed_on_as_the_box_numbers_them(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert visible_index("1", "CUDA_VISIBLE_DEVICES") == "5"  # our GPU 1 is the box's GPU 5, the cell's to be told
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_index("1", "CUDA_VISIBLE_DEVICES") == "1"


def test_the_pool_gives_a_cell_as_many_devices_as_it_needs_or_none():
    pool = DevicePool(["0", "1", "2"])
    assert pool.take(2) == ("0", "1")
    assert pool.take(2) is None
    pool.give_back(("0", "1"))
    assert sorted(pool.take(3)) == ["0", "1", "2"]


def test_the_cores_are_shared_among_the_devices():
    assert threads_per_cell(4, cpu_count=16) == 4
    assert threads_per_cell(3, cpu_count=2) == 1


def test_gpus_on_a_machine_without_one_is_a_one_line_error(tmp_path):
    matrix = write_matrix(tmp_path, tiny_matrix())
    result = amp_suite("run", "--matrix", str(matrix), "--out", str(tmp_path / "out"), "--gpus", "2", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--gpus" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_malformed_gpus_is_refused_before_torch_loads(tmp_path):
    matrix = write_matrix(tmp_path, tiny_matrix())
    clock = time.monotonic()
    result = amp_suite("run", "--matrix", str(matrix), "--out", str(tmp_path / "out"), "--gpus", "0,x", cwd=tmp_path)
    assert result.returncode == 2 and "--gpus: give all" in result.stderr
    assert time.monotonic() - clock < 10


# Loaded by every process of the run through PYTHONPATH: the suite's own process (`python -m
# amp_suite`) sees three GPUs; its forkserver (`python -c`), and so every cell, keeps torch as it is
# and runs the cell it is handed on the CPU. What the CLI does with --gpus is real: it counts the
# GPUs, hands each cell its own through CUDA_VISIBLE_DEVICES and a share of the cores, runs them side
# by side and records them from its threads; only where the training happens is stood in for.
THREE_STAND_IN_GPUS = """
import sys

if sys.argv[:1] != ["-c"]:
    import torch

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 3
else:
    import amp_suite.cell.run

    on_the_gpu = amp_suite.cell.run.run_cell

    def run_cell(spec, *args, **kwargs):
        assert spec.device == "cuda"  # the suite sent it to a GPU
        return on_the_gpu(spec.model_copy(update={"device": "cpu"}), *args, **kwargs)

    amp_suite.cell.run.run_cell = run_cell
"""


def _with_three_gpus(tmp_path) -> dict[str, str]:
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(THREE_STAND_IN_GPUS)
    return {"PYTHONPATH": str(tmp_path / "hooks")}


@pytest.mark.slow
def test_gpus_through_the_cli_runs_each_cell_once_on_a_gpu_of_its_own_side_by_side(tmp_path):
    matrix = write_matrix(tmp_path, tiny_matrix(name="gpus", precisions=["fp32"], repeats=3, steps=300))
    out, three_gpus = tmp_path / "out", _with_three_gpus(tmp_path)
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(out), "--gpus", "all", cwd=tmp_path, env=three_gpus)
    assert done.returncode == 0, done.stdout + done.stderr
    directory = RunDirectory(out)
    records, unreadable = directory.results.read()
    assert unreadable == 0 and sorted(r.cell_id for r in records) == [f"mlp/bs8/seed{s}/fp32" for s in range(3)]
    assert {r.status for r in records} == {"ok"}
    assert sorted(r.environment["cuda_visible_devices"] for r in records) == STAND_INS  # one GPU each
    assert {r.environment["torch_threads"] for r in records} == {max(1, psutil.cpu_count() // 3)}
    assert _most_at_once(records) >= 2  # side by side
    parents, children = runs_in(f"sqlite:///{out / 'mlflow.db'}", "gpus")
    assert len(parents) == 1 and sorted(c.data.tags["cell_id"] for c in children) == sorted(r.cell_id for r in records)

    more = amp_suite("run", "--matrix", str(matrix), "--out", str(tmp_path / "more"), "--gpus", "4", cwd=tmp_path,
                     env=three_gpus)  # fmt: skip
    assert more.returncode == 2 and "only 3 GPU" in more.stderr, more.stderr
    assert len(more.stderr.strip().splitlines()) == 1 and not (tmp_path / "more").exists()
