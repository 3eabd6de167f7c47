"""What every command shares: the Typer app, the two consoles, one-line errors, and the
devices, matrices and options that several commands take."""

from __future__ import annotations

import importlib
import os
import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from amp_suite.analysis.outcome import ExitCode
from amp_suite.cli.terminal import TerminalStream, settle_terminal_size
from amp_suite.config import ConfigError
from amp_suite.config.problems import did_you_mean
from amp_suite.errors import shorten
from amp_suite.hardware.backends import backend_named, backend_of
from amp_suite.paths import shown
from amp_suite.text import printable
from amp_suite.tracking.uri import mask_credentials


def _flags_without_a_type() -> None:
    """Typer (0.29) prints each option's type beside it in --help, a flag's too: `--help <bool>`,
    `--json <bool>`, as if each took a value (`--json true` is refused). A flag's column is left
    empty; options that take a value keep theirs."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "leaves_flags_out", False):  # an older Typer shows none; or done
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag and not self.count else shown(self, ctx)

    display_type_rich.leaves_flags_out = True
    TyperOption.display_type_rich = display_type_rich


_flags_without_a_type()
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Measure whether automatic mixed precision pays off on this machine, and record it in MLflow.",
)


def _width(stream: TerminalStream) -> int | None:
    """The terminal's width (None: rich asks it, or takes COLUMNS); 200 for logs and CI, which are not
    terminals and where rich would otherwise squeeze the summary table into 80 columns."""
    return None if stream.isatty() or os.environ.get("COLUMNS", "").isdigit() else 200


settle_terminal_size()  # before any console reads COLUMNS
output, error_output = TerminalStream("stdout"), TerminalStream("stderr")
console = Console(file=output, width=_width(output), emoji=False)  # ":x:" in a path stays ":x:"
errors = Console(file=error_output, width=_width(error_output), emoji=False)

# A wheel carries the matrices inside the package; a source checkout has them beside it.
PACKAGED_EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
EXPERIMENTS_DIR = (
    PACKAGED_EXPERIMENTS if PACKAGED_EXPERIMENTS.is_dir() else PACKAGED_EXPERIMENTS.parent.parent / "experiments"
)
MAX_USAGE_LINE = 300  # a usage error quotes the value given, whatever its length
# MLflow's HTTP defaults retry for ~4 minutes per call; a run would sit through that on every
# call to a dead server. Users can still set their own values.
MLFLOW_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    # MLflow prints a "View run" link per run on stdout, through our progress display.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    # ... and a progress bar per artifact download (a report reads one record.json per run).
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}


class DeviceChoice(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def fail(message: str, code: int = ExitCode.BAD_INPUT) -> typer.Exit:
    """The error on stderr in one line; or, where it lists problems ("matrix m.yaml: 3 problems:"
    and a line each, amp_suite.config.problems), in one line per problem. Any other line break,
    e.g. in a library's exception text, is a space."""
    first, *rest = str(message).split("\n")
    lines = [first, *rest] if LISTS_PROBLEMS.search(first) else [str(message)]
    first, *listed = (mask_credentials(" ".join(printable(line).split())) for line in lines)
    text = "\n".join([f"amp-suite: error: {first}", *(f"  {line}" for line in listed if line)])
    errors.print(text, highlight=False, markup=False, soft_wrap=True)
    return typer.Exit(int(code))


LISTS_PROBLEMS = re.compile(r"\b\d+ problems:$")


def click_errors():
    """The exceptions of the click that Typer runs on: its own copy since Typer 0.2x, click before."""
    return importlib.import_module(typer.BadParameter.__module__)


def usage_error(exc) -> typer.Exit:
    """Click's usage error (its "Usage:" lines, a box around the reason) as one bounded line."""
    reason = exc.format_message().replace("Value error, ", "").rstrip(".")  # how Typer words a choice that is not one
    context = getattr(exc, "ctx", None)
    command = context.command_path if context is not None else "amp-suite"
    return fail(f"{shorten(reason, MAX_USAGE_LINE)} (see {command} --help)", exc.exit_code)


def ended(code: int) -> int:
    """The exit code, once the command's words are out: where stdout failed, one line on stderr and
    exit 5 (WRITE_FAILED) in place of a 0; a code that already says something went wrong is kept."""
    reason = output.lost_reason()
    if reason is None:
        return code
    fail(f"the output could not be written to stdout ({reason}); what the command wrote to files is unaffected")
    return code or int(ExitCode.WRITE_FAILED)


def say(message: str) -> None:
    console.print(printable(mask_credentials(message)), highlight=False, markup=False)


def warn(message: str) -> None:
    """A problem that did not stop the command, on stderr."""
    line = printable(mask_credentials(message))
    errors.print(f"amp-suite: warning: {line}", highlight=False, markup=False, soft_wrap=True)


def resolve_device(choice: DeviceChoice) -> str:
    if choice is DeviceChoice.cpu:
        return "cpu"  # nothing to ask torch: the parent then never loads it (seconds saved per run)
    import warnings

    import torch  # checking for CUDA does not create a context in this process

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if available:  # ROCm presents an AMD GPU as CUDA: its backend refuses it here, in one line, before anything runs
        backend_of(torch.device("cuda"))
    if choice is DeviceChoice.auto:
        return "cuda" if available else "cpu"
    if choice is DeviceChoice.cuda and not available:
        why = f" ({str(caught[0].message).strip().splitlines()[0][:200]})" if caught else ""
        container = in_container()
        where = ""
        if os.environ.get("AMP_SUITE_DEVICE"):
            where = " (AMP_SUITE_DEVICE in this image)" if container else " (AMP_SUITE_DEVICE)"
        advice = no_gpu_advice(container, torch.version.cuda)
        raise ConfigError(f"--device cuda{where}: no CUDA GPU is visible to PyTorch{why}; {advice}; or --device cpu")
    return choice.value


# Docker leaves /.dockerenv in a container's root, podman /run/.containerenv; the suite's image
# names its base in AMP_SUITE_IMAGE_BASE (Dockerfile).
CONTAINER_MARKERS = (Path("/.dockerenv"), Path("/run/.containerenv"))


def in_container() -> bool:
    return bool(os.environ.get("AMP_SUITE_IMAGE_BASE")) or any(marker.exists() for marker in CONTAINER_MARKERS)


def no_gpu_advice(container: bool, cuda_build: str | None) -> str:
    """What to do when PyTorch sees no GPU, where it applies: a container is given the host's GPUs
    when it starts; on a host, PyTorch must be a CUDA build, and the driver must show the GPU."""
    if container:
        return "give the container the GPUs (docker run --gpus all) on a host whose driver supports this image's CUDA"
    if cuda_build is None:
        return "this PyTorch is a CPU-only build: install a CUDA build (https://pytorch.org/get-started/locally/)"
    return (
        f"this PyTorch is built for CUDA {cuda_build}: check that nvidia-smi lists a GPU, that its driver supports"
        " that CUDA, and that CUDA_VISIBLE_DEVICES does not hide it"
    )


def default_matrix(device: str) -> Path:
    return EXPERIMENTS_DIR / backend_named(device).default_matrix


def resolve_matrix(given: Path) -> Path:
    """A path, or the name of a shipped matrix ("smoke", "failure-modes.yaml"): in a container
    the shipped ones live inside the package, not under the working directory. A file wins over
    a shipped name; a folder does not (`--matrix smoke` beside a run folder named smoke). Nothing
    there, but a shipped name close to it: a ConfigError that names it ("smok": did you mean 'smoke'?)."""
    try:
        if given.is_file() or (given.exists() and len(given.parts) > 1):
            return given
        for candidate in (EXPERIMENTS_DIR / given.name, EXPERIMENTS_DIR / f"{given.name}.yaml"):
            if candidate.is_file():
                return candidate
        exists = given.exists()
    except OSError:  # e.g. a name too long for the file system
        exists = False
    shipped = [path.stem for path in EXPERIMENTS_DIR.glob("*.yaml")]
    hint = did_you_mean(given.name.removesuffix(".yaml"), shipped)
    if not exists and hint:
        raise ConfigError(f"matrix {shown(given)}: no such file, nor a shipped matrix of that name{hint}")
    return given  # load_matrix says what is wrong with it


def split_names(option: str, values: Optional[str]) -> Optional[list[str]]:
    if values is None:
        return None
    names = [v.strip() for v in values.split(",") if v.strip()]
    if not names:
        raise ConfigError(f"{option}: empty")
    return names


SHIPPED_MATRICES = ", ".join(sorted(path.stem for path in EXPERIMENTS_DIR.glob("*.yaml")))
MatrixOption = Annotated[
    Optional[Path],
    typer.Option(
        help=f"Matrix YAML, or a shipped matrix's name ({SHIPPED_MATRICES}) [default: default on CUDA, else smoke]"
    ),
]


def folder(value: str | Path) -> Path:
    """A folder option's value. An empty one is refused: Path("") is the working directory, which
    would then take a run's or a report's files unasked (`.` says so when meant)."""
    if str(value) == "":
        raise typer.BadParameter("empty; give a folder (. for the working directory)")
    return Path(value)


def source(value: str) -> str:
    """A run folder, results.jsonl or experiment to read. An empty one is refused: as a path it is
    the working directory, whose records would be read unasked."""
    if value == "":
        raise typer.BadParameter("empty; give a run folder (. for the working directory)")
    return value


OutOption = Annotated[
    Path,
    typer.Option(
        envvar="AMP_SUITE_OUT", parser=folder, help="Folder for results.jsonl, logs and the embedded MLflow store."
    ),
]
TrackingOption = Annotated[
    Optional[str], typer.Option(envvar="MLFLOW_TRACKING_URI", help="MLflow server [default: sqlite:///<out>/mlflow.db]")
]
