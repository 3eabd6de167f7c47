"""Command line: the only package that reads argv and the environment.

Exit codes (amp_suite.analysis.outcome.ExitCode): 0 as expected, 2 bad input (nothing ran), 3 a cell
failed, 4 an unexpected verdict, 5 a record, the report or the output could not be written, 128+N stopped
by signal N.
Each command lives in its own module; importing the module registers it on `app`.
"""

import typer

from amp_suite.cli import device, predict, report, run, store  # noqa: F401  (registers the commands)
from amp_suite.cli.common import (
    EXPERIMENTS_DIR,
    app,
    click_errors,
    default_matrix,
    ended,
    resolve_matrix,
    usage_error,
)
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
    """Every usage error as one line (exit 2) instead of Typer's box; a command whose output could
    not be written says so on stderr and exits 5 where it would have exited 0."""
    import sys

    errors = click_errors()
    no_args = getattr(errors, "NoArgsIsHelpError", ())  # click 8.2 and later
    try:
        code = app(prog_name="amp-suite", standalone_mode=False)
    except no_args as exc:  # `amp-suite` alone: the help, as Typer shows it
        from typer import rich_utils

        rich_utils.rich_format_error(exc)
        code = exc.exit_code
    except errors.ClickException as exc:  # a usage error: an unknown option, a value out of range
        code = usage_error(exc).exit_code
    except typer.Abort:  # Ctrl-C at a prompt
        code = 130
    sys.exit(ended(code if isinstance(code, int) else 0))
