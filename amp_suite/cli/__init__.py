"""Command line: the only package that reads argv and the environment.

Exit codes (amp_suite.analysis.outcome.ExitCode): 0 as expected, 2 bad input (nothing ran), 3 a cell
failed, 4 an unexpected verdict, 5 a record could not be written, 128+N stopped by signal N.
Each command lives in its own module; importing the module registers it on `app`.
"""

from amp_suite.cli import device, report, run, store  # noqa: F401  (registers the commands)
from amp_suite.cli.common import EXPERIMENTS_DIR, app, default_matrix, resolve_matrix
from amp_suite.cli.run import deployment_environment
from amp_suite.cli.store import _is_loopback

__all__ = [
    "EXPERIMENTS_DIR",
    "app",
    "default_matrix",
    "deployment_environment",
    "main",
    "resolve_matrix",
    "_is_loopback",
]


def main() -> None:
    app(prog_name="amp-suite")
