"""A cell's pace from the progress the parent hears: step times within a phase of steps only, never
across a phase change or a wait for a turn; the matrix's time left from the cells' step times."""

from __future__ import annotations

import pytest

from amp_suite.execution.pace import WAITING, MatrixPace, Pace, step_words, words_for


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def heard(pace: Pace, clock: Clock, at: float, *message) -> None:
    clock.now = at
    pace.heard(*message)


def test_step_times_come_from_messages_of_one_phase_of_steps():
    clock = Clock()
    pace = Pace(warmup_steps=2, steps=10, clock=clock)
    heard(pace, clock, 30.0, "diagnostics", 0, 1)
    heard(pace, clock, 60.0, "warmup", 1, 2)  # the first step and the diagnostics: no step time
    assert pace.step_s is None and pace.words() == ""
    heard(pace, clock, 68.0, "warmup", 2, 2)
    assert pace.step_s == 8.0
    heard(pace, clock, 100.0, "measure", 1, 10)  # a phase change: its interval is not a step's
    heard(pace, clock, 116.0, "measure", 3, 10)
    assert pace.step_s == 8.0  # median of 8 s and 8 s a step
    assert pace.phase_left_s() == 56.0 and pace.cell_left_s() == 56.0
    clock.now = 126.0  # counts down between a slow cell's messages
    assert pace.phase_left_s() == 46.0
    assert pace.words() == "8.0 s/step, ~0:46 left"


def test_a_wait_for_the_turn_is_no_step_time():
    clock = Clock()
    pace = Pace(warmup_steps=0, steps=6, clock=clock)
    heard(pace, clock, 0.0, "measure", 1, 6)
    heard(pace, clock, 1.0, "measure", 2, 6)
    heard(pace, clock, 1.0, WAITING, 2, 6)
    heard(pace, clock, 100.0, "measure", 2, 6)  # granted: the clock starts again
    heard(pace, clock, 101.0, "measure", 3, 6)
    assert pace.step_s == 1.0
    assert pace.words() == "1.0 s/step, ~0:03 left"


def test_fast_steps_read_as_a_rate():
    clock = Clock()
    pace = Pace(warmup_steps=0, steps=5000, clock=clock)
    heard(pace, clock, 0.0, "measure", 100, 5000)
    heard(pace, clock, 1.0, "measure", 1100, 5000)
    assert pace.words() == "1,000 steps/s, ~0:04 left"


def test_the_matrix_is_estimated_from_cells_that_differ_in_seed_alone():
    clock = Clock()
    matrix = MatrixPace()
    assert matrix.words() == ""
    first, second, other = (Pace(warmup_steps=2, steps=10, clock=clock) for _ in range(3))
    matrix.add("a/seed0", "a", first)
    matrix.add("a/seed1", "a", second)
    matrix.add("b/seed0", "b", other)
    assert matrix.words() == "time left unknown until a cell has timed its first steps"
    heard(first, clock, 0.0, "measure", 1, 10)
    heard(first, clock, 2.0, "measure", 2, 10)
    matrix.learn("a/seed0")
    assert matrix.left() == (8 * 2.0 + 12 * 2.0, 1)  # its 8 steps left, and a seed's 2 + 10
    assert matrix.words() == "about 40 s of steps left (+1 cell not yet timed)"
    matrix.ended("a/seed0")
    assert matrix.left() == (24.0, 1)


@pytest.mark.parametrize(
    ("seconds", "words"), [(0.0004, "0.4 ms"), (0.085, "85 ms"), (8.14, "8.1 s"), (250.0, "250 s")]
)
def test_step_words(seconds, words):
    assert step_words(seconds) == words


@pytest.mark.parametrize(("seconds", "words"), [(40, "40 s"), (480, "8 min"), (5400, "1.5 h")])
def test_wait_words(seconds, words):
    assert words_for(seconds) == words
