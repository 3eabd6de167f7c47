"""Trackers mirror results.jsonl where people review it. The runner sees only `Tracker`.

results.jsonl is the record of truth and the tracker only a mirror, so a tracker must never
stop or slow the measurements: `FailSafeTracker` lets a failure at the start stop the run (with
one line naming the store), and turns any later failure into one warning, after which it stops
calling the tracker for the rest of the run (a circuit breaker: a dead server would otherwise
cost its timeouts on every call). `amp-suite sync` fills the store in afterwards.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from amp_suite.analysis.conclusion import Conclusion
from amp_suite.analysis.outcome import Outcome
from amp_suite.config import CellSpec, ConfigError, Matrix
from amp_suite.records.invocations import Invocation, InvocationStarted
from amp_suite.records.results import CellRecord, describe_error
from amp_suite.signals import signals_held
from amp_suite.tracking.uri import mask_credentials


class TrackingError(RuntimeError):
    """The tracking store can't be used; raised only before any cell runs."""


class Tracker(Protocol):
    def start(self, invocation: InvocationStarted, matrix: Matrix) -> None:
        """Open the invocation's run; raise if the store can't be used."""

    def close_orphans(self, invocations: Sequence[Invocation]) -> None:
        """Close runs left open by earlier invocations whose process was killed."""

    def start_cell(self, spec: CellSpec, record_id: str) -> str | None:
        """Open the cell's run; returns its id in the store."""

    def finish_cell(self, record: CellRecord) -> None: ...

    def finish(self, conclusion: Conclusion, outcome: Outcome, report: Path | None) -> None:
        """Log the conclusion (the summary, the answers, each cell's verdicts) and the report folder
        (None: no report)."""

    def abort(self, ending: str, why: str) -> None:
        """Mark whatever is open as killed, saying how the run ended and why."""


# The tracker a run mirrors into, chosen by its tracking URI's scheme. MLflow's stores (folders,
# SQLite and other databases, HTTP servers) take every URI no entry claims. A new tracker is one
# module with a Tracker and its opener, plus its scheme here.
TRACKERS: dict[str, str] = {}  # URI scheme -> "module:opener", opener(uri, run_folder) -> Tracker
DEFAULT_TRACKER = "amp_suite.tracking.mlflow_tracker:open_mlflow_tracker"


def open_tracker(uri: str, run_folder: Path | None = None) -> Tracker:
    """The tracker for `uri`, imported only when asked for. `run_folder`: the --out folder when
    `uri` is that folder's own store. A store that can't be opened raises TrackingError."""
    scheme = uri.partition(":")[0].lower() if ":" in uri else ""
    module, _, opener = TRACKERS.get(scheme, DEFAULT_TRACKER).partition(":")
    try:
        return getattr(importlib.import_module(module), opener)(uri, run_folder)
    except ConfigError:
        raise  # the folder's own store could not be repointed: the folder's problem, said as such
    except Exception as exc:  # a missing database driver, a malformed URI
        raise TrackingError(describe_error(exc)) from exc


class FailSafeTracker:
    """A tracker whose failures after start() become one warning and then silence."""

    def __init__(self, tracker: Tracker, warn: Callable[[str], None], catch_up: str) -> None:
        """`catch_up`: the command that fills the store in later, for the warning."""
        self.tracker = tracker
        self.warn = warn
        self.catch_up = catch_up
        self.broken = False

    def start(self, invocation: InvocationStarted, matrix: Matrix) -> None:
        try:
            with signals_held():
                self.tracker.start(invocation, matrix)
        except Exception as exc:
            raise TrackingError(mask_credentials(describe_error(exc))) from exc

    def close_orphans(self, invocations: Sequence[Invocation]) -> None:
        if invocations:
            self._call("close runs left open by a killed run", self.tracker.close_orphans, invocations)

    def start_cell(self, spec: CellSpec, record_id: str) -> str | None:
        return self._call(f"open a run for {spec.cell_id}", self.tracker.start_cell, spec, record_id)

    def finish_cell(self, record: CellRecord) -> None:
        self._call(f"log {record.cell_id}", self.tracker.finish_cell, record)

    def finish(self, conclusion: Conclusion, outcome: Outcome, report: Path | None) -> None:
        self._call("log the summary", self.tracker.finish, conclusion, outcome, report)

    def abort(self, ending: str, why: str) -> None:
        self._call("mark the interrupted runs killed", self.tracker.abort, ending, why)

    def _call(self, what: str, action: Callable[..., Any], *args: Any) -> Any:
        if self.broken:
            return None
        try:
            # A stop signal waits for the call to end: cut off mid-commit, an SQLite store stays
            # locked and the runs it should close stay RUNNING.
            with signals_held():
                return action(*args)
        except Exception as exc:  # the record is in results.jsonl already: say so once, then stop calling
            self.broken = True
            self.warn(
                f"tracking: could not {what} ({mask_credentials(describe_error(exc))}); tracking is off for the rest "
                f"of this run and measuring goes on. results.jsonl has every record: `{self.catch_up}` "
                "uploads them later."
            )
            return None
