"""invocations.jsonl: one line when an `amp-suite run` starts and one when it ends. No torch here.

With results.jsonl it holds everything needed to rebuild the tracker's view of a run directory
(`amp-suite sync`): the experiment, the matrix, and how each invocation ended. An invocation
with no end line was killed outright (SIGKILL, power loss): the next run that takes the
directory's lock records that, and closes the tracker runs it left open.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from amp_suite.records.jsonl import append_line, read_objects
from amp_suite.records.results import utc_now

# finished: the matrix ran to its end; interrupted: a signal stopped it; stopped: an error did
# (e.g. a full disk); killed: its process died without a word, found by a later run.
Ending = Literal["finished", "interrupted", "stopped", "killed"]
SIGNALLED: Ending = "interrupted"  # the word a cell stopped by a signal also ends in (config.base.INTERRUPTED)


class _Line(BaseModel):
    model_config = ConfigDict(extra="allow")  # lines from other versions stay readable


class InvocationStarted(_Line):
    event: Literal["started"] = "started"
    invocation_id: str
    at: str
    experiment: str
    matrix: str
    matrix_text: str
    matrix_config: dict[str, Any]  # the resolved matrix (defaults filled in, selections applied)
    cells: int
    reused: list[str] = []  # records an earlier run wrote that --resume counted in (their identity)
    host: str
    pid: int

    @classmethod
    def now(
        cls, experiment: str, matrix_text: str, matrix_config: dict[str, Any], cells: int, reused: list[str]
    ) -> InvocationStarted:
        return cls(
            invocation_id=new_id(), at=utc_now(), experiment=experiment, matrix=matrix_config["name"],
            matrix_text=matrix_text, matrix_config=matrix_config, cells=cells, reused=reused,
            host=socket.gethostname(), pid=os.getpid(),
        )  # fmt: skip


class InvocationEnded(_Line):
    event: Literal["ended"] = "ended"
    invocation_id: str
    at: str
    outcome: Ending
    detail: str | None = None


@dataclass(frozen=True)
class Invocation:
    started: InvocationStarted
    ended: InvocationEnded | None

    @property
    def invocation_id(self) -> str:
        return self.started.invocation_id

    @property
    def finished(self) -> bool:
        return self.ended is not None and self.ended.outcome == "finished"

    def killed_note(self) -> str:
        """What happened to an invocation that never wrote its end line."""
        return f"its process (pid {self.started.pid} on {self.started.host}) was killed before the run ended"


def new_id() -> str:
    return uuid.uuid4().hex[:16]


class InvocationLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def start(self, line: InvocationStarted) -> None:
        append_line(self.path, line.model_dump_json())

    def end(self, invocation_id: str, outcome: Ending, detail: str | None = None) -> None:
        line = InvocationEnded(invocation_id=invocation_id, at=utc_now(), outcome=outcome, detail=detail)
        append_line(self.path, line.model_dump_json())

    def read(self) -> tuple[list[Invocation], int]:
        """Invocations in the order they started, and how many lines could not be read as one."""
        started: dict[str, InvocationStarted] = {}
        ended: dict[str, InvocationEnded] = {}
        objects, unreadable = read_objects(self.path)
        for data in objects:
            try:
                if data.get("event") == "started":
                    line = InvocationStarted.model_validate(data)
                    started[line.invocation_id] = line
                elif data.get("event") == "ended":
                    end = InvocationEnded.model_validate(data)
                    ended.setdefault(end.invocation_id, end)
                else:
                    unreadable += 1
            except ValidationError:
                unreadable += 1
        return [Invocation(line, ended.get(key)) for key, line in started.items()], unreadable

    def unfinished(self) -> list[Invocation]:
        return [invocation for invocation in self.read()[0] if invocation.ended is None]
