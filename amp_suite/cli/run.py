"""`amp-suite run`: check the input, run the matrix, write its report, say how it ended."""

from __future__ import annotations

import errno
import os
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from amp_suite.analysis.outcome import ExitCode
from amp_suite.cli.common import (
    MLFLOW_HTTP_DEFAULTS,
    DeviceChoice,
    MatrixOption,
    OutOption,
    TrackingOption,
    app,
    console,
    default_matrix,
    fail,
    resolve_device,
    resolve_matrix,
    say,
    split_names,
)
from amp_suite.cli.preflight import MODEL_BATCH_SIZE, MODEL_MATRIX, check_workloads, model_matrix
from amp_suite.config import ConfigError, Matrix, load_matrix, read_matrix_text
from amp_suite.config.precisions import ARTICLE_MODES, REFERENCE
from amp_suite.execution.executors import Executor, OnThisBox
from amp_suite.execution.process_tree import end_descendants, ending_run_processes
from amp_suite.execution.scheduler import GpuSelection
from amp_suite.execution.watchdog import Limits
from amp_suite.execution.worker import working_directory_off_the_path
from amp_suite.hardware.backends import backend_named
from amp_suite.records.rundir import RunDirectory
from amp_suite.tracking.uri import check_server_answers, check_tracking_store, embedded_store_uri, mask_credentials

IMAGE_PREFIX = "AMP_SUITE_IMAGE_"  # set by the container image: its base, CUDA line, torch index
MAX_EXPERIMENT_NAME = 256


@app.command()
@ending_run_processes()  # every process the run starts (the entry check, cells, what they fork) ends with it
def run(
    matrix: MatrixOption = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Your own model instead of a matrix: module:function or file.py:function returning an"
            f" amp_suite.UserWorkload ({', '.join(ARTICLE_MODES)};"
            f" batch {MODEL_BATCH_SIZE}, {MODEL_MATRIX['steps']} steps)"
        ),
    ] = None,
    out: OutOption = Path("runs"),
    tracking_uri: TrackingOption = None,
    experiment: Annotated[Optional[str], typer.Option(help="MLflow experiment [default: the matrix name]")] = None,
    device: Annotated[
        DeviceChoice, typer.Option(envvar="AMP_SUITE_DEVICE", help="Where cells run; auto falls back to the CPU.")
    ] = DeviceChoice.auto,
    workloads: Annotated[Optional[str], typer.Option(help="Comma-separated workload names to keep.")] = None,
    precisions: Annotated[Optional[str], typer.Option(help="Comma-separated precision modes to keep.")] = None,
    force: Annotated[bool, typer.Option(help="Run modes this hardware is slow at instead of skipping them.")] = False,
    resume: Annotated[bool, typer.Option(help="Skip cells already recorded ok in <out>/results.jsonl.")] = False,
    gpus: Annotated[
        Optional[str],
        typer.Option(help="Run cells side by side, one per GPU: all, a count (4) or indexes (0,2; 3, alone)"),
    ] = None,
    ray: Annotated[
        Optional[str],
        typer.Option(help="Run cells on a Ray cluster: its address (ray://host:10001, host:6379) or auto"),
    ] = None,
) -> None:
    """Run a precision matrix and record every cell in results.jsonl and MLflow."""
    try:
        # Everything that needs no torch is checked first: bad input fails in a second.
        Limits.from_environment()  # the stall watchdog's, if the environment sets them
        working_directory_off_the_path()  # before any child process: a datasets.py here is not datasets
        if tracking_uri is not None:
            check_tracking_store(tracking_uri)  # port, scheme, driver, SQLite folder
            check_server_answers(tracking_uri)  # a server that isn't there: seconds, before torch loads
        RunDirectory.check_writable(out)
        if experiment is not None and not 0 < len(experiment) <= MAX_EXPERIMENT_NAME:
            raise ConfigError(f"--experiment: give 1 to {MAX_EXPERIMENT_NAME} characters")
        selection = (split_names("--workloads", workloads), split_names("--precisions", precisions))
        selection_of_gpus = GpuSelection.parse(gpus) if gpus is not None else None
        if selection_of_gpus and ray is not None:
            raise ConfigError("--gpus and --ray: choose one (on a Ray cluster, each cell asks Ray for its GPUs)")
        if ray is not None and "@" in ray:  # never echoed: the part before '@' would be a secret
            raise ConfigError("--ray: a Ray address has no user or password; give host:port, ray://host:10001 or auto")
        if selection_of_gpus and device is DeviceChoice.cpu:
            raise ConfigError("--gpus runs cells on CUDA GPUs; --device cpu runs them on the CPU: choose one")
        if model is not None and matrix is not None:
            raise ConfigError("--model and --matrix: choose one (a matrix names its own with workload: custom)")
        path = resolve_matrix(matrix) if matrix is not None else None
        selected = load_matrix(path).select(*selection) if path is not None else None
        if model is not None:
            modelled, text = model_matrix(model)
            selected = modelled.select(*selection)
        _check_machines(selected, ray)
        # GPU indexes as nvidia-smi and NVML number them (PCI bus order), for --gpus and for each
        # cell's CUDA_VISIBLE_DEVICES; CUDA's default puts the fastest GPU first. Before CUDA starts.
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        if ray is not None:
            resolved_device = _fleet_device(device)
        else:  # with --gpus, no GPU is an error, not a note that the CPU will do
            resolved_device = _local_device(device, announce=selection_of_gpus is None)
        if selected is None:
            path = default_matrix(resolved_device)
            say(f"No --matrix given: running {path} for device {resolved_device}.")
            selected = load_matrix(path).select(*selection)
            _check_machines(selected, ray)
        cells = selected.cells(resolved_device, force=force)
        if path is not None:
            text = read_matrix_text(path)
        check_workloads(selected)  # models by name exist; a user's entry imports and builds (a child process)
        executor = _fleet(ray) if ray is not None else OnThisBox(_devices(selection_of_gpus, resolved_device))
    except ConfigError as exc:
        raise fail(str(exc)) from None
    except ConnectionError as exc:
        raise fail(f"tracking store {tracking_uri} is not usable: {exc}") from None
    if not any(w.uses_hub for w in selected.workloads):
        # Nothing asked for the hub: make sure no library waits on it (HF retries for ~25 s).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    for key, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    try:
        _run_matrix(selected, cells, text, out, tracking_uri, experiment or selected.name, resume, executor)
    finally:
        executor.close()


def _check_machines(selected: Matrix | None, ray: str | None) -> None:
    if selected is not None and selected.machines and ray is None:
        raise ConfigError("machines: the matrix runs once per GPU type on a Ray cluster; pass --ray ADDRESS")


def _local_device(choice: DeviceChoice, announce: bool) -> str:
    resolved = resolve_device(choice)  # the first torch import: after the cheap checks
    if backend_named(resolved).is_host and choice is DeviceChoice.auto and announce:
        say("No CUDA GPU is visible to PyTorch: running on the CPU.")
    return resolved


def _fleet_device(choice: DeviceChoice) -> str:
    """A fleet's cells run on its GPUs (auto), whatever this box, the driver, has."""
    return "cpu" if choice is DeviceChoice.cpu else "cuda"


def _fleet(address: str):
    from amp_suite.execution.executors import OnFleet
    from amp_suite.execution.fleet import Fleet

    fleet = Fleet(address)
    fleet.connect()
    return OnFleet(fleet)


def _devices(selection: GpuSelection | None, device: str) -> list[str] | None:
    """The GPUs --gpus names, as CUDA indexes of this process (None: cells take turns)."""
    if selection is None:
        return None
    if backend_named(device).is_host:
        raise ConfigError("--gpus runs cells on CUDA GPUs; this run is on the CPU (no GPU visible, or --device cpu)")
    import torch

    return selection.resolve(torch.cuda.device_count())  # counts without creating a CUDA context


def deployment_environment() -> dict[str, object]:
    """What the container image says about itself, for every record's environment block."""
    image = {
        key.removeprefix(IMAGE_PREFIX).lower(): value
        for key, value in os.environ.items()
        if key.startswith(IMAGE_PREFIX)
    }
    extra: dict[str, object] = {"image": image} if image else {}
    if os.environ.get("AMP_SUITE_GIT_COMMIT"):  # an image has no .git to ask
        extra["git_commit"] = os.environ["AMP_SUITE_GIT_COMMIT"]
    return extra


def _run_matrix(
    matrix: Matrix, cells, text: str, out: Path, tracking_uri, experiment: str, resume: bool, executor: Executor
) -> None:
    from amp_suite.cli.display import RichDisplay, print_answer, print_outcome, print_summary
    from amp_suite.execution.runner import MatrixRunner
    from amp_suite.records.jsonl import LineWriteError
    from amp_suite.signals import signal_of, stop_on_signals
    from amp_suite.tracking import FailSafeTracker, TrackingError, open_tracker
    from amp_suite.tracking.logs import route_store_logs

    directory = RunDirectory(out)
    uri = tracking_uri or embedded_store_uri(out)
    route_store_logs(None)  # until the folder is ours: a refused run leaves nothing behind
    catch_up = f"amp-suite sync {shlex.quote(str(out))}" + (f" --tracking-uri {tracking_uri}" if tracking_uri else "")
    runner = None
    try:
        given = open_tracker(tracking_uri) if tracking_uri else None  # run() found a server there
        # A second stop signal ends every process below this one at once (the first stops the cells
        # and records what they measured).
        with stop_on_signals(end_descendants), directory.locked("amp-suite run"), RichDisplay(console) as display:
            executor.start(cells)  # the folder is ours: cells' processes load torch while the store opens
            route_store_logs(out / "logs" / "tracking.log", tracking_uri)
            mirror = given or open_tracker(uri, run_folder=out)  # the folder's own store, once the folder is ours
            tracker = FailSafeTracker(mirror, display.warn, mask_credentials(catch_up))
            runner = MatrixRunner(
                matrix, cells, directory, tracker, display, resume, deployment_environment(), _reporter(out), executor
            )
            conclusion, outcome = runner.run(experiment, text)
    except ConfigError as exc:  # the folder is busy or can't be written
        raise fail(str(exc)) from None
    except (TrackingError, ConnectionError) as exc:
        raise fail(f"tracking store {uri} is not usable: {exc}") from None
    except LineWriteError as exc:
        raise fail(_unwritten(exc, directory), ExitCode.WRITE_FAILED) from None
    except KeyboardInterrupt as exc:
        stopped_by = signal_of(exc)
        raise fail(_stopped(stopped_by, runner.recorded if runner else 0, directory), 128 + stopped_by) from None
    records = conclusion.records
    kinds = sorted({r.peak_memory_kind for r in records if r.peak_memory_kind})
    print_summary(console, conclusion.rows, f"{matrix.name}: {len(records)} cells", ", ".join(kinds) or None)
    print_answer(console, conclusion.answers, conclusion.labels)
    report = runner.report_folder / "report.html" if runner.report_folder else "not written (see the warning above)"
    say(f"Results: {directory.results.path}   Report: {report}")
    say(f"MLflow: {uri}   (amp-suite ui --out {shlex.quote(str(out))})")
    print_outcome(console, outcome)
    raise typer.Exit(int(outcome.exit_code))


def _stopped(by, recorded: int, directory: RunDirectory) -> str:
    """The stop's one line, true to what is in the folder: the cells that ended, and those the stop
    interrupted, with the windows they finished (execution.runner), are records in results.jsonl."""
    if not recorded:
        return f"stopped by {by.name} before any cell of this run was recorded (--resume continues)"
    return (
        f"stopped by {by.name}; this run's {recorded} record(s), the interrupted cells' with the windows they"
        f" measured, are in {directory.results.path} (--resume continues)"
    )


def _unwritten(exc: OSError, directory: RunDirectory) -> str:
    """What a failed append means for the records, and what to do: by its cause, not one guess."""
    if not directory.path.is_dir():  # the folder was removed (or moved) under the running matrix
        return f"{exc.strerror}: {directory.path} is gone, and the records this run wrote into it with it"
    remedy = {errno.ENOSPC: "Make room", errno.EDQUOT: "Make room (a disk quota is full)",
              errno.EACCES: "Make it writable", errno.EPERM: "Make it writable",
              errno.EROFS: "Remount it read-write"}.get(exc.errno, "Fix that")  # fmt: skip
    return (
        f"{exc.strerror}; every record before it is intact in {directory.results.path}."
        f" {remedy}, then run again with --resume"
    )


def _reporter(out: Path):
    """Writes the finished matrix's report into <out>/report (the tracker logs it to the parent)."""

    def write(conclusion) -> Path:
        from amp_suite.report import load_references, make_report
        from amp_suite.report.render import FORMATS

        records, references = list(conclusion.records), load_references(None)
        make_report(records, references, REFERENCE, [str(out)], 0, out / "report", FORMATS, conclusion=conclusion)
        return out / "report"

    return write
