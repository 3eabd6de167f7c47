"""The progress display, as a cell's neighbour: on a small CPU its refresh thread takes a core's
time from the cell it shows (scripts/bench_overhead.py measures what is left)."""

from __future__ import annotations

import io

from conftest import tiny_matrix
from rich.console import Console

from amp_suite.cli.display import PaceColumn, RichDisplay
from amp_suite.config import Matrix
from amp_suite.execution.pace import WAITING


def test_progress_renders_only_where_it_is_seen_and_at_most_once_a_second():
    piped = RichDisplay(Console(file=io.StringIO()))
    terminal = RichDisplay(Console(file=io.StringIO(), force_terminal=True))
    assert not piped.progress.live.auto_refresh  # not a terminal: transient bars are never shown
    assert terminal.progress.live.auto_refresh and terminal.progress.live.refresh_per_second <= 1


SPECS = {spec.precision: spec for spec in Matrix.model_validate(tiny_matrix(steps=60)).cells("cpu")}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def started(display: RichDisplay, spec) -> Clock:
    clock = Clock()
    display.start_cell(spec)
    display.matrix.paces[spec.cell_id].clock = clock
    return clock


def steps(display: RichDisplay, spec, clock: Clock, messages) -> None:
    for at, phase, done, total in messages:
        clock.now = at
        display.cell_progress(spec, phase, done, total)


def test_a_forced_cell_prints_one_estimate_of_its_timed_steps_as_they_begin():
    out = io.StringIO()
    display = RichDisplay(Console(file=out, width=200))
    display.begin(2, 0)
    forced, plain_fp32 = SPECS["bf16"], SPECS["fp32"]
    assert forced.force and not plain_fp32.force
    clock = started(display, forced)
    steps(display, forced, clock, [(10.0, "warmup", 1, 2)])
    assert out.getvalue() == ""  # no step timed yet: nothing to estimate from
    steps(display, forced, clock, [(18.1, "warmup", 2, 2), (26.2, "measure", 1, 60), (34.3, "measure", 2, 60)])
    printed = out.getvalue().splitlines()
    assert printed == [
        "  mlp/bs8/seed0/bf16 (forced): ~8.1 s a step, about 8 min for 60 timed steps; the matrix: about 8 min of"
        " steps left (+1 cell not yet timed)"
    ]
    # A fast cell that is not forced prints nothing: a pipe's output stays as it was.
    other = started(display, plain_fp32)
    steps(display, plain_fp32, other, [(0.0, "measure", 1, 60), (1.0, "measure", 60, 60)])
    assert out.getvalue().splitlines() == printed


def test_a_slow_cell_prints_its_estimate_unforced():
    out = io.StringIO()
    display = RichDisplay(Console(file=out, width=200))
    spec = SPECS["fp32"]
    clock = started(display, spec)
    steps(display, spec, clock, [(0.0, "measure", 1, 60), (2.0, "measure", 2, 60)])
    assert "mlp/bs8/seed0/fp32 (slow): ~2.0 s a step, about 2 min for 60 timed steps" in out.getvalue()


def test_the_bar_says_when_a_cell_waits_for_its_turn_or_times_rounds_past_the_schedule():
    display = RichDisplay(Console(file=io.StringIO(), force_terminal=True, width=200))
    spec = SPECS["fp32"]
    clock = started(display, spec)
    task = display.running[spec.cell_id][0]
    steps(display, spec, clock, [(0.0, "measure", 10, 60), (1.0, WAITING, 10, 60)])
    assert display.progress.tasks[task].description.endswith("fp32 waiting for its turn")
    steps(display, spec, clock, [(5.0, "measure", 61, 70)])
    assert display.progress.tasks[task].description.endswith("fp32 measure, rounds past the schedule")
    steps(display, spec, clock, [(6.0, "measure", 62, 70)])
    assert PaceColumn().render(display.progress.tasks[task]).plain == "1.0 s/step, ~0:08 left"
    cells = display.progress.tasks[display.cells_task]
    assert "steps left" in PaceColumn().render(cells).plain


def test_where_no_bar_is_drawn_a_running_cell_prints_its_bar_as_a_line_every_30_s():
    """A pipe, a log, `docker run` without -t: a forced emulated cell was silent for 10 minutes there."""
    out = io.StringIO()
    display = RichDisplay(Console(file=out, width=200))  # not a terminal
    spec = SPECS["fp32"]
    clock = started(display, spec)
    steps(display, spec, clock, [(0.0, "measure", 1, 60), (8.0, "measure", 2, 60), (29.0, "measure", 4, 60)])
    assert "measure" not in out.getvalue().replace("(slow)", "")  # the estimate line only, before 30 s
    steps(display, spec, clock, [(32.0, "measure", 5, 60)])
    assert out.getvalue().splitlines()[-1] == "  mlp/bs8/seed0/fp32 measure 5/60, 8.0 s/step, ~7:20 left"
    steps(display, spec, clock, [(40.0, "measure", 6, 60)])
    assert out.getvalue().count("measure 6/60") == 0  # the next one 30 s after
    terminal = RichDisplay(Console(file=io.StringIO(), force_terminal=True, width=200))
    on_screen = started(terminal, spec)
    steps(terminal, spec, on_screen, [(0.0, "measure", 1, 60), (40.0, "measure", 2, 60)])
    assert "measure 2/60," not in terminal.console.file.getvalue()  # a terminal has its bar
