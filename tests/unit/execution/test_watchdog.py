"""The stall watchdog's judgement, on a clock the test moves (the CLI's tests: tests/e2e/test_every_cell_ends.py)."""

from __future__ import annotations

import pytest

from amp_suite.config import ConfigError
from amp_suite.execution.watchdog import Limits, Watch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(stall_s: float = 10, phase_s: float = 100, window_steps: int = 1) -> tuple[Watch, Clock]:
    clock = Clock()
    return Watch(Limits(stall_s, phase_s), window_steps, clock), clock


def test_no_step_for_longer_than_the_limit_is_a_stall_named_by_its_phase_and_step():
    cell, clock = watch()
    for step in range(1, 11):  # 1 s a step: the limit is max(10 s, 20 x 1 s)
        clock.now += 1
        cell.progress("measure", step, 60)
    clock.now += 19
    cell.heard()  # its heartbeat goes on: the process runs, its steps don't
    assert cell.stalled() is None
    clock.now += 2
    cell.heard()
    expected = "stalled in measure (step 10 of 60): no step completed for 21 s (limit 20 s; its median step 1 s)"
    assert cell.stalled() == expected


def test_a_phase_without_steps_has_the_phase_limit_and_compiling_warmup_steps_too():
    cell, clock = watch()
    clock.now += 99
    cell.heard()
    assert cell.stalled() is None  # building the model: 99 s is within the phase limit
    cell.progress("warmup", 1, 10)  # the first warmup steps compile
    clock.now += 99
    cell.heard()
    assert cell.stalled() is None
    clock.now += 2
    cell.heard()
    assert cell.stalled().startswith("stalled in warmup (step 1 of 10): no progress for 101 s (limit 100 s)")


def test_silence_is_a_stall_whatever_the_phase():
    cell, clock = watch()
    clock.now += 11
    assert "no heartbeat for 11 s (limit 10 s)" in cell.stalled()


def test_waiting_for_its_turn_is_no_stall_and_the_wait_is_no_step_time():
    cell, clock = watch()
    for step in range(1, 5):
        clock.now += 0.1
        cell.progress("measure", step, 60)
    cell.wait_turn()
    clock.now += 500  # another cell's windows
    cell.heard()
    assert cell.stalled() is None
    cell.granted()
    clock.now += 0.1
    cell.progress("measure", 5, 60)
    clock.now += 9.9
    cell.heard()
    assert cell.stalled() is None  # its median step is still 0.1 s: the limit is 10 s
    clock.now += 0.2
    assert cell.stalled().endswith("(limit 10 s; its median step 100 ms)")


def test_windows_keep_only_rates_that_are_rates():
    cell, _ = watch()
    for rate in (100.0, None, float("nan"), 0.0, -1.0, 120.0):
        cell.window(rate)
    assert cell.windows == [100.0, 120.0]


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon", "1e9"])
def test_a_limit_the_environment_gets_wrong_is_refused(monkeypatch, value):
    monkeypatch.setenv("AMP_SUITE_STALL_S", value)
    with pytest.raises(ConfigError, match="AMP_SUITE_STALL_S: give a number of seconds"):
        Limits.from_environment()


def test_limits_default_and_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("AMP_SUITE_STALL_S", raising=False)
    monkeypatch.setenv("AMP_SUITE_PHASE_LIMIT_S", "5")
    assert Limits.from_environment() == Limits(60.0, 5.0)
    assert Limits(60.0, 5.0).heartbeat_s == 5.0 and Limits(2.0, 5.0).heartbeat_s == pytest.approx(0.4)
