"""Command line: the only module that reads argv and the environment.

Exit codes (amp_suite.outcome.ExitCode): 0 as expected, 2 bad input (nothing ran), 3 a cell
failed, 4 an unexpected verdict, 5 a record could not be written, 128+N stopped by signal N.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from amp_suite.config import ConfigError, Matrix, load_matrix, read_matrix_text
from amp_suite.outcome import ExitCode
from amp_suite.rundir import RunDirectory
from amp_suite.tracking.uri import check_tracking_uri, embedded_store_uri, mask_credentials

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Measure whether automatic mixed precision pays off on this machine, and record it in MLflow.",
)
# Logs and CI are not terminals; rich would squeeze the summary table into 80 columns there.
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

# A wheel carries the matrices inside the package; a source checkout has them beside it.
PACKAGED_EXPERIMENTS = Path(__file__).resolve().parent / "experiments"
EXPERIMENTS_DIR = (
    PACKAGED_EXPERIMENTS if PACKAGED_EXPERIMENTS.is_dir() else PACKAGED_EXPERIMENTS.parent.parent / "experiments"
)
IMAGE_PREFIX = "AMP_SUITE_IMAGE_"  # set by the container image: its base, CUDA line, torch index
# MLflow's HTTP defaults retry for ~4 minutes per call; a run would sit through that on every
# call to a dead server. Users can still set their own values.
MLFLOW_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    # MLflow prints a "View run" link per run on stdout, through our progress display.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}
MAX_EXPERIMENT_NAME = 256
REPORT_FORMATS = ("html", "md", "json")


class BaselineChoice(str, Enum):
    fp32 = "fp32"
    tf32 = "tf32"


class DeviceChoice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def fail(message: str, code: int = ExitCode.BAD_INPUT) -> typer.Exit:
    line = mask_credentials(" ".join(message.split()))
    errors.print(f"amp-suite: error: {line}", highlight=False, markup=False, soft_wrap=True)
    return typer.Exit(int(code))


def say(message: str) -> None:
    console.print(mask_credentials(message), highlight=False, markup=False)


def resolve_device(choice: DeviceChoice) -> str:
    import warnings

    import torch  # checking for CUDA does not create a context in this process

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if choice is DeviceChoice.auto:
        return "cuda" if available else "cpu"
    if choice is DeviceChoice.cuda and not available:
        why = f" ({str(caught[0].message).strip().splitlines()[0][:200]})" if caught else ""
        where = " (AMP_SUITE_DEVICE in this image)" if os.environ.get("AMP_SUITE_DEVICE") else ""
        raise ConfigError(
            f"--device cuda{where}: no CUDA GPU is visible to PyTorch{why}; give the container the GPUs"
            " (docker run --gpus all) on a host whose driver supports this image's CUDA, or pass --device cpu"
        )
    return choice.value


def default_matrix(device: str) -> Path:
    return EXPERIMENTS_DIR / ("default.yaml" if device == "cuda" else "smoke.yaml")


def resolve_matrix(given: Path) -> Path:
    """A path, or the name of a shipped matrix ("smoke", "failure-modes.yaml"): in a container
    the shipped ones live inside the package, not under the working directory."""
    try:
        if given.exists():
            return given
        for candidate in (EXPERIMENTS_DIR / given.name, EXPERIMENTS_DIR / f"{given.name}.yaml"):
            if candidate.is_file():
                return candidate
    except OSError:  # e.g. a name too long for the file system
        pass
    return given  # load_matrix says what is wrong with it


def _split(option: str, values: Optional[str]) -> Optional[list[str]]:
    if values is None:
        return None
    names = [v.strip() for v in values.split(",") if v.strip()]
    if not names:
        raise ConfigError(f"{option}: empty")
    return names


MatrixOption = Annotated[
    Optional[Path],
    typer.Option(
        help="Matrix YAML, or a shipped matrix's name (smoke, default, failure-modes, gpu-check)"
        " [default: default on CUDA, else smoke]"
    ),
]
OutOption = Annotated[
    Path, typer.Option(envvar="AMP_SUITE_OUT", help="Folder for results.jsonl, logs and the embedded MLflow store.")
]
TrackingOption = Annotated[
    Optional[str], typer.Option(envvar="MLFLOW_TRACKING_URI", help="MLflow server [default: sqlite:///<out>/mlflow.db]")
]


@app.command()
def run(
    matrix: MatrixOption = None,
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
) -> None:
    """Run a precision matrix and record every cell in results.jsonl and MLflow."""
    try:
        # Everything that needs no torch is checked first: bad input fails in a second.
        if tracking_uri is not None:
            check_tracking_uri(tracking_uri)
        RunDirectory.check_writable(out)
        if experiment is not None and not 0 < len(experiment) <= MAX_EXPERIMENT_NAME:
            raise ConfigError(f"--experiment: give 1 to {MAX_EXPERIMENT_NAME} characters")
        selection = (_split("--workloads", workloads), _split("--precisions", precisions))
        path = resolve_matrix(matrix) if matrix is not None else None
        selected = load_matrix(path).select(*selection) if path is not None else None
        resolved_device = resolve_device(device)  # the first torch import: after the cheap checks
        if resolved_device == "cpu" and device is DeviceChoice.auto:
            say("No CUDA GPU is visible to PyTorch: running on the CPU.")
        if path is None:
            path = default_matrix(resolved_device)
            say(f"No --matrix given: running {path} for device {resolved_device}.")
            selected = load_matrix(path).select(*selection)
        cells = selected.cells(resolved_device, force=force)
        text = read_matrix_text(path)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    if not any(w.data.source == "hub" for w in selected.workloads):
        # Nothing asked for the hub: make sure no library waits on it (HF retries for ~25 s).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    for key, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    _run_matrix(selected, cells, text, out, tracking_uri, experiment or selected.name, resume)


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


def _run_matrix(matrix: Matrix, cells, text: str, out: Path, tracking_uri, experiment: str, resume: bool) -> None:
    from amp_suite.display import RichDisplay, print_outcome, print_summary
    from amp_suite.jsonl import LineWriteError
    from amp_suite.runner import MatrixRunner
    from amp_suite.signals import signal_of, stop_on_signals
    from amp_suite.tracking import FailSafeTracker, TrackingError
    from amp_suite.tracking.mlflow_tracker import MlflowTracker

    directory = RunDirectory(out)
    uri = tracking_uri or embedded_store_uri(out)
    catch_up = f"amp-suite sync {out}" + (f" --tracking-uri {tracking_uri}" if tracking_uri else "")
    try:
        store = _open_store(tracking_uri, None) if tracking_uri else None
        if store is not None:
            store.check_reachable()  # before anything is written
        with stop_on_signals(), directory.locked("amp-suite run"), RichDisplay(console) as display:
            store = store or _open_store(uri, out / "mlartifacts")  # the embedded store lives in --out
            tracker = FailSafeTracker(MlflowTracker(store), display.warn, mask_credentials(catch_up))
            runner = MatrixRunner(
                matrix, cells, directory, tracker, display, resume, deployment_environment(), _reporter(out)
            )
            records, summary, outcome = runner.run(experiment, text)
    except ConfigError as exc:  # the folder is busy or can't be written
        raise fail(str(exc)) from None
    except (TrackingError, ConnectionError) as exc:
        raise fail(f"tracking store {uri} is not usable: {exc}") from None
    except LineWriteError as exc:
        raise fail(
            f"{exc.strerror}; every record before it is intact in {directory.results.path}."
            " Make room, then run again with --resume",
            ExitCode.WRITE_FAILED,
        ) from None
    except KeyboardInterrupt as exc:
        stopped_by = signal_of(exc)
        raise fail(
            f"stopped by {stopped_by.name}; finished cells are in {directory.results.path} (--resume continues)",
            128 + stopped_by,
        ) from None
    kinds = sorted({r.peak_memory_kind for r in records if r.peak_memory_kind})
    print_summary(console, summary, f"{matrix.name}: {len(records)} cells", ", ".join(kinds) or None)
    say(f"Results: {directory.results.path}   Report: {out / 'report' / 'report.html'}")
    say(f"MLflow: {uri}   (amp-suite ui --out {out})")
    print_outcome(console, outcome)
    raise typer.Exit(int(outcome.exit_code))


def _reporter(out: Path):
    """Writes the finished matrix's report into <out>/report (the tracker logs it to the parent)."""

    def write(records) -> Path:
        from amp_suite.report import load_references, make_report

        make_report(records, load_references(None), "fp32", [str(out)], 0, out / "report", REPORT_FORMATS)
        return out / "report"

    return write


def _open_store(uri: str, artifact_root: Path | None):
    """The MLflow client; some stores connect at once (a database driver may be missing)."""
    from amp_suite.results import describe_error
    from amp_suite.tracking import TrackingError
    from amp_suite.tracking.mlflow_store import MlflowStore

    try:
        return MlflowStore(uri, artifact_root)
    except Exception as exc:
        raise TrackingError(describe_error(exc)) from exc


@app.command()
def sync(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders (each with results.jsonl).", show_default=False)],
    tracking_uri: Annotated[
        Optional[str],
        typer.Option(envvar="MLFLOW_TRACKING_URI", help="MLflow store [default: each folder's own mlflow.db]"),
    ] = None,
) -> None:
    """Upload run folders' records into MLflow: what an outage missed, or several boxes into one server.

    Idempotent: records already there are left alone, so a second sync adds nothing."""
    try:
        if tracking_uri is not None:
            check_tracking_uri(tracking_uri)
        for folder in run_dirs:
            if not any((folder / name).is_file() for name in ("results.jsonl", "invocations.jsonl")):
                raise ConfigError(f"{folder}: not a run folder (no results.jsonl or invocations.jsonl)")
    except ConfigError as exc:
        raise fail(str(exc)) from None
    for key, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    for folder in run_dirs:
        _sync_folder(RunDirectory(folder), tracking_uri)


def _sync_folder(directory: RunDirectory, tracking_uri: str | None) -> None:
    from contextlib import nullcontext

    from amp_suite.results import describe_error
    from amp_suite.tracking.mlflow_store import MlflowStore
    from amp_suite.tracking.sync import SyncReport, sync_run_dir

    uri = tracking_uri or embedded_store_uri(directory.path)
    # A folder gathered read-only can't be written by a run either: there is nothing to lock.
    writable = os.access(directory.path, os.W_OK)
    report = SyncReport()
    try:
        store = MlflowStore(uri)
        store.check_reachable()
        with directory.locked("amp-suite sync") if writable else nullcontext():
            sync_run_dir(directory, store, report)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        if not report.wrote_anything:  # e.g. not an MLflow server, or a store that won't open
            raise fail(f"tracking store {uri} is not usable: {describe_error(exc)}") from None
        # What was synced stays, and sync can simply run again.
        stopped = f"sync of {directory.path} into {uri} stopped: {describe_error(exc)}"
        raise fail(stopped, ExitCode.WRITE_FAILED) from None
    say(f"{directory.path} -> {uri}: {report.describe()}")


@app.command()
def report(
    sources: Annotated[
        list[str],
        typer.Argument(
            help="Run folders, results.jsonl files, or MLflow experiment names (with --tracking-uri).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Optional[Path], typer.Option(help="Folder for the report [default: <the run folder>/report, else ./report]")
    ] = None,
    formats: Annotated[str, typer.Option("--format", help="Comma-separated: html, md, json.")] = "html,md,json",
    baseline: Annotated[BaselineChoice, typer.Option(help="What speedups divide by.")] = BaselineChoice.fp32,
    references: Annotated[
        Optional[str], typer.Option(help="A shipped reference set's name or a YAML file [default: every shipped set]")
    ] = None,
    tracking_uri: Annotated[
        Optional[str], typer.Option(envvar="MLFLOW_TRACKING_URI", help="MLflow store to read experiments from.")
    ] = None,
) -> None:
    """Tables, figures, published references and the article's claims from records of one or many machines.

    Machines (device model and software stack) are never merged: each is its own column."""
    from amp_suite.report import load_references, make_report
    from amp_suite.report.sources import check_sources, gather

    try:
        chosen = _split("--format", formats) or []
        unknown = [f for f in chosen if f not in REPORT_FORMATS]
        if unknown:
            raise ConfigError(f"--format: unknown {[u[:20] for u in unknown[:5]]}; choose from {list(REPORT_FORMATS)}")
        if tracking_uri is not None:
            check_tracking_uri(tracking_uri)
        check_sources(sources, tracking_uri)
        destination = out or _report_folder(sources)
        RunDirectory.check_writable(destination)
        published = load_references(references)
        gathered = gather(sources, tracking_uri)
        if not gathered.records:
            raise ConfigError(f"no records in {', '.join(s[:200] for s in sources)}: nothing to report")
    except ConfigError as exc:
        raise fail(str(exc)) from None
    except ConnectionError as exc:
        raise fail(f"tracking store {tracking_uri} is not usable: {exc}") from None
    done, written = make_report(
        gathered.records, published, baseline.value, sources, gathered.unreadable, destination, chosen
    )
    verdicts = _counts(c.verdict for c in done.claims)
    matched = _counts(r.verdict for r in done.references)
    say(f"{done.records} records, {len(done.machines)} machine(s): {', '.join(m.label for m in done.machines)}")
    say(f"claims: {verdicts}; references: {matched}")
    for path in written:
        if path.parent == destination:
            say(f"wrote {path}")


def _report_folder(sources: list[str]) -> Path:
    """A single run folder keeps its report beside its records; anything else writes ./report."""
    if len(sources) == 1 and Path(sources[0]).is_dir():
        return Path(sources[0]) / "report"
    return Path("report")


def _counts(values) -> str:
    from collections import Counter

    return ", ".join(f"{n} {v}" for v, n in Counter(values).items()) or "none"


@app.command()
def doctor(
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    device: Annotated[DeviceChoice, typer.Option(help="Which device to describe.")] = DeviceChoice.auto,
) -> None:
    """Describe this machine's precision support and recommend a precision mode."""
    import json

    import torch

    from amp_suite.doctor import diagnose

    try:
        resolved = resolve_device(device)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    report = diagnose(torch.device(resolved))
    report["cuda_available"] = torch.cuda.is_available()
    if json_output:
        console.print_json(json.dumps(report))
        return
    if not report["cuda_available"]:
        say("No CUDA GPU is visible to PyTorch; describing the CPU.")
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        say(f"{key:>24}: {value}")


@app.command()
def inspect(
    workload: Annotated[str, typer.Option(help="Workload name in the matrix (resnet, transformer, mlp).")],
    precision: Annotated[str, typer.Option(help="Precision mode: fp32, tf32, fp16, bf16 or fp16-noscale.")],
    matrix: MatrixOption = None,
    device: Annotated[DeviceChoice, typer.Option(help="Where to run the step.")] = DeviceChoice.auto,
    json_output: Annotated[bool, typer.Option("--json", help="Print the audit as JSON.")] = False,
) -> None:
    """Run one training step and show, per aten op, the dtypes autocast actually used."""
    import json

    from amp_suite.cell import audit_cell
    from amp_suite.config import PRECISIONS, CellSpec
    from amp_suite.display import print_audit

    try:
        resolved = resolve_device(device)
        if precision not in PRECISIONS:
            raise ConfigError(f"--precision: unknown {precision[:40]!r}; choose from {list(PRECISIONS)}")
        loaded = load_matrix(resolve_matrix(matrix) if matrix is not None else default_matrix(resolved))
        names = [w.name for w in loaded.workloads]
        if workload not in names:
            raise ConfigError(f"--workload: unknown {workload[:40]!r}; this matrix has {names}")
        chosen = loaded.select([workload], None)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    config = chosen.workloads[0]
    spec = CellSpec(
        matrix=chosen.name, workload=config, precision=precision, batch_size=config.batch_sizes[0], seed=chosen.seed,
        steps=1, warmup_steps=1, max_grad_norm=chosen.max_grad_norm, device=resolved, force=True,
    )  # fmt: skip
    audit = {"workload": config.name, "device": resolved, **audit_cell(spec)}
    if json_output:
        console.print_json(json.dumps(audit))
    else:
        print_audit(console, audit)


@app.command()
def ui(
    out: Annotated[Path, typer.Option(envvar="AMP_SUITE_OUT", help="The --out folder of an earlier run.")] = Path(
        "runs"
    ),
    host: Annotated[str, typer.Option(help="Interface to bind; keep 127.0.0.1 unless behind auth.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port for the UI.")] = 5000,
) -> None:
    """Open the MLflow UI on the embedded store of an earlier run."""
    store = out / "mlflow.db"
    if not store.is_file():
        raise fail(f"--out {out}: no MLflow store at {store}; run `amp-suite run --out {out}` first")
    if not _is_loopback(host):
        errors.print(
            f"amp-suite: warning: serving {store} on {host}:{port} without authentication: anyone who can reach"
            " that port can read, change and delete every run. Keep --host 127.0.0.1 (in a container, publish the"
            " port on the host's loopback only: -p 127.0.0.1:5000:5000), or use docker/compose.yaml's server,"
            " which requires a login.",
            highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
    _relocate_artifacts(RunDirectory(out))
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", embedded_store_uri(out)]
    command += ["--host", host, "--port", str(port)]
    say(f"MLflow UI on http://{host}:{port} (Ctrl-C to stop)")
    os.execv(sys.executable, command)


def _relocate_artifacts(directory: RunDirectory) -> None:
    """A moved or gathered folder's store still points at the old artifact path: repoint it.
    A run in progress holds the folder, and its paths are current: nothing to do then."""
    from amp_suite.rundir import OutDirBusy
    from amp_suite.tracking.relocate import relocate_artifacts

    try:
        with directory.locked("amp-suite ui"):
            moved = relocate_artifacts(directory.path / "mlflow.db")
    except OutDirBusy:
        return
    except ConfigError as exc:  # e.g. a read-only folder: the UI still shows runs and metrics
        errors.print(f"amp-suite: warning: artifacts not relocated: {exc}", highlight=False, markup=False)
        return
    if moved:
        say(f"{directory.path} was moved: pointed {moved} experiment(s)' artifacts at {directory.path / 'mlartifacts'}")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def main() -> None:
    app(prog_name="amp-suite")


if __name__ == "__main__":
    main()
