"""Where cells run: one after another on this box, side by side on its GPUs, or on a Ray fleet.

An executor answers the runner's questions, and the runner does everything else the same way for
all three (records, tracker, display, batch search): how many cells may run at once (`prepare`
returns the slots; None: one at a time, in the runner's thread), why a cell cannot run here at
all (`unrunnable`), how to run one cell or one batch-search probe given the slots it holds
(`runner`), and how to say where it runs (`where`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from amp_suite.config import CellSpec
from amp_suite.execution.fleet import Fleet, capacity, machine_types, slots
from amp_suite.execution.scheduler import threads_per_cell, visible_index
from amp_suite.execution.watchdog import Watch
from amp_suite.execution.worker import UNPLACED, Context, Placement, Seat, cell_context, run_isolated
from amp_suite.hardware.backends import backend_named
from amp_suite.records.results import CellRecord

Progress = Callable[[str, int, int], None]
RunOne = Callable[[CellSpec, Progress], CellRecord]  # runs a cell (or a probe of it) to its record


class Executor(Protocol):
    def start(self, cells: Sequence[CellSpec]) -> None:
        """Begin loading what these cells need, while the caller goes on (opening its store)."""

    def prepare(self, cells: Sequence[CellSpec]) -> list[str] | None: ...
    def unrunnable(self, spec: CellSpec) -> str | None: ...
    def runner(
        self,
        log: Path,
        held: tuple[str, ...],
        cancelled: threading.Event | None,
        seat: Seat | None = None,
        watch: Watch | None = None,
    ) -> RunOne: ...
    def where(self, held: tuple[str, ...]) -> str: ...
    def close(self) -> None: ...


class OnThisBox:
    """Cells on this box: one after another with the whole box each (every GPU visible, every
    core), or, given `--gpus` devices, side by side, each cell seeing only the GPUs it holds."""

    def __init__(self, devices: Sequence[str] | None = None) -> None:
        self.devices = list(devices) if devices else None
        self.threads = threads_per_cell(len(self.devices)) if self.devices else None
        self.context: Context | None = None

    def start(self, cells: Sequence[CellSpec]) -> None:
        """The forkserver imports torch and the workloads (seconds) beside the parent's own start."""
        self.context = cell_context(sorted({spec.workload.module for spec in cells}), start=True)

    def prepare(self, cells: Sequence[CellSpec]) -> list[str] | None:
        if self.context is None:
            self.context = cell_context(sorted({spec.workload.module for spec in cells}))
        return self.devices

    def unrunnable(self, spec: CellSpec) -> str | None:
        if self.devices and spec.gpus > len(self.devices):
            return f"needs {spec.gpus} GPUs; --gpus gave {len(self.devices)}"
        return None

    def runner(
        self,
        log: Path,
        held: tuple[str, ...],
        cancelled: threading.Event | None,
        seat: Seat | None = None,
        watch: Watch | None = None,
    ) -> RunOne:
        """`seat`: the cell takes turns with the other cells of its comparison (execution.side_by_side).
        `watch`: what the run hears of the cell (execution.watchdog), kept by the caller."""
        context = self.context
        assert context is not None, "prepare() first"

        def run(cell: CellSpec, progress: Progress) -> CellRecord:
            variable = backend_named(cell.device).visible_devices
            named = ",".join(visible_index(index, variable) for index in held) if variable else None
            placement = Placement(named, self.threads, variable) if held else UNPLACED
            return run_isolated(
                context, cell, log, progress, placement=placement, cancelled=cancelled, seat=seat, watch=watch
            )

        return run

    def where(self, held: tuple[str, ...]) -> str:
        return f"gpu {','.join(held)}"

    def close(self) -> None:
        pass  # the forkserver ends with the run's process (process_tree.end_run_processes)


class OnFleet:
    """`--ray`: cells as Ray tasks, as many at once as the cluster has GPUs (CPUs for CPU cells)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.resources: dict[str, float] = {}

    def start(self, cells: Sequence[CellSpec]) -> None:
        pass  # the cluster's workers load what they need

    def prepare(self, cells: Sequence[CellSpec]) -> list[str] | None:
        self.resources = self.fleet.resources()  # the cluster as the run starts
        # One slot per GPU (or core) the cluster has now; Ray places each task on a node that fits.
        count = slots(cells[0].device if cells else "cuda", self.resources)
        return [f"ray-{slot}" for slot in range(max(1, count))]

    def unrunnable(self, spec: CellSpec) -> str | None:
        types = machine_types(self.resources)
        if spec.machine and spec.machine not in types:
            return f"no {spec.machine} node in the Ray cluster (its GPU types: {', '.join(types) or 'none'})"
        if capacity(spec, self.resources) == 0:
            return "the Ray cluster has no room for it (too few GPUs or CPUs in all)"
        return None

    def runner(
        self,
        log: Path,
        held: tuple[str, ...],
        cancelled: threading.Event | None,
        seat: Seat | None = None,
        watch: Watch | None = None,
    ) -> RunOne:
        # No seats: cells hold nodes of their own. The node's worker keeps its own watch.
        return lambda cell, progress: self.fleet.run(cell, log, cancelled)

    def where(self, held: tuple[str, ...]) -> str:
        return "on Ray"

    def close(self) -> None:
        self.fleet.close()
