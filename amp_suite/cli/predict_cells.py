"""`amp-suite predict --model`: the entry of the user's own model whose recorded cells predict may
profile, as `amp-suite run --model` takes it. Which recorded cells predict profiles, and what it
builds of them, is amp_suite.report.cell_profiles'."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from amp_suite.config.workloads import ENTRY_PATTERN
from amp_suite.errors import shorten


def entry_option(value: str) -> str:
    """--model: an entry as `amp-suite run --model` takes it; a file is resolved from the working
    directory, as run resolves it."""
    if not re.fullmatch(ENTRY_PATTERN, value) or len(value) > 4096:
        raise typer.BadParameter(f"{shorten(value, 60)!r}: give module:function or file.py:function")
    where, function = value.rsplit(":", 1)
    if where.endswith(".py"):
        return f"{Path(where).expanduser().resolve()}:{function}"
    return value
