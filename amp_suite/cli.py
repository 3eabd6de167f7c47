"""Command line: the only module that reads argv and the environment. Bad input exits 2."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from amp_suite.config import ConfigError, Matrix, load_matrix
from amp_suite.tracking import TrackingError, embedded_store_uri

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


class DeviceChoice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def fail(message: str, code: int = 2) -> typer.Exit:
    errors.print(f"amp-suite: error: {message}", highlight=False, markup=False, soft_wrap=True)
    return typer.Exit(code)


def resolve_device(choice: DeviceChoice) -> str:
    import torch  # checking for CUDA does not create a context in this process

    available = torch.cuda.is_available()
    if choice is DeviceChoice.auto:
        return "cuda" if available else "cpu"
    if choice is DeviceChoice.cuda and not available:
        raise ConfigError("--device cuda: no CUDA device is visible to PyTorch (try --device cpu)")
    return choice.value


def default_matrix(device: str) -> Path:
    return EXPERIMENTS_DIR / ("default.yaml" if device == "cuda" else "smoke.yaml")


def resolve_matrix(given: Path | None, device: str) -> Path:
    """A path, or the name of a shipped matrix ("smoke", "failure-modes.yaml"): in a container
    the shipped ones live inside the package, not under the working directory."""
    if given is None:
        return default_matrix(device)
    if given.exists():
        return given
    for candidate in (EXPERIMENTS_DIR / given.name, EXPERIMENTS_DIR / f"{given.name}.yaml"):
        if candidate.is_file():
            return candidate
    return given  # load_matrix says it does not exist


def _split(values: Optional[str]) -> Optional[list[str]]:
    return [v.strip() for v in values.split(",") if v.strip()] if values else None


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
    device: Annotated[DeviceChoice, typer.Option(help="Where cells run.")] = DeviceChoice.auto,
    workloads: Annotated[Optional[str], typer.Option(help="Comma-separated workload names to keep.")] = None,
    precisions: Annotated[Optional[str], typer.Option(help="Comma-separated precision modes to keep.")] = None,
    force: Annotated[bool, typer.Option(help="Run modes this hardware is slow at instead of skipping them.")] = False,
    resume: Annotated[bool, typer.Option(help="Skip cells already recorded ok in <out>/results.jsonl.")] = False,
) -> None:
    """Run a precision matrix and record every cell in results.jsonl and MLflow."""
    try:
        resolved_device = resolve_device(device)
        path = resolve_matrix(matrix, resolved_device)
        if matrix is None:
            console.print(f"No --matrix given: running {path} for device {resolved_device}.", highlight=False)
        selected = load_matrix(path).select(_split(workloads), _split(precisions))
        cells = selected.cells(resolved_device, force=force)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    if not any(w.data.source == "hub" for w in selected.workloads):
        # Nothing asked for the hub: make sure no library waits on it (HF retries for ~25 s).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    _run_matrix(selected, cells, path, out, tracking_uri, experiment or selected.name, resume)


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


def _run_matrix(matrix: Matrix, cells, path: Path, out: Path, tracking_uri, experiment: str, resume: bool) -> None:
    from amp_suite.display import RichDisplay, print_summary
    from amp_suite.runner import MatrixRunner
    from amp_suite.tracking import MlflowTracker

    out.mkdir(parents=True, exist_ok=True)
    uri = tracking_uri or embedded_store_uri(out)
    try:
        with RichDisplay(console) as display:
            tracker = MlflowTracker(uri, display.warn, artifact_root=None if tracking_uri else out / "mlartifacts")
            runner = MatrixRunner(matrix, cells, out, tracker, display, resume, deployment_environment())
            records, summary = runner.run(experiment, path.read_text())
    except TrackingError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise fail("interrupted; finished cells are in results.jsonl (use --resume)", 130) from None
    kinds = sorted({r.peak_memory_kind for r in records if r.peak_memory_kind})
    print_summary(console, summary, f"{matrix.name}: {len(records)} cells", ", ".join(kinds) or None)
    console.print(f"Results: {out / 'results.jsonl'}   MLflow: {uri}   (amp-suite ui --out {out})", highlight=False)


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
        console.print("No CUDA GPU is visible to PyTorch; describing the CPU.", highlight=False)
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        console.print(f"{key:>24}: {value}", highlight=False)


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
            raise ConfigError(f"--precision: unknown {precision!r}; choose from {list(PRECISIONS)}")
        loaded = load_matrix(resolve_matrix(matrix, resolved))
        names = [w.name for w in loaded.workloads]
        if workload not in names:
            raise ConfigError(f"--workload: unknown {workload!r}; this matrix has {names}")
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
    port: Annotated[int, typer.Option(help="Port for the UI.")] = 5000,
) -> None:
    """Open the MLflow UI on the embedded store of an earlier run."""
    store = out / "mlflow.db"
    if not store.is_file():
        raise fail(f"--out {out}: no MLflow store at {store}; run `amp-suite run --out {out}` first")
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", embedded_store_uri(out)]
    command += ["--host", host, "--port", str(port)]
    console.print(f"MLflow UI on http://{host}:{port} (Ctrl-C to stop)", highlight=False)
    os.execv(sys.executable, command)


def main() -> None:
    app(prog_name="amp-suite")


if __name__ == "__main__":
    main()
