"""The progress display, as a cell's neighbour: on a small CPU its refresh thread takes a core's
time from the cell it shows (scripts/bench_overhead.py measures what is left)."""

from __future__ import annotations

import io

from rich.console import Console

from amp_suite.cli.display import RichDisplay


def test_progress_renders_only_where_it_is_seen_and_at_most_once_a_second():
    piped = RichDisplay(Console(file=io.StringIO()))
    terminal = RichDisplay(Console(file=io.StringIO(), force_terminal=True))
    assert not piped.progress.live.auto_refresh  # not a terminal: transient bars are never shown
    assert terminal.progress.live.auto_refresh and terminal.progress.live.refresh_per_second <= 1
