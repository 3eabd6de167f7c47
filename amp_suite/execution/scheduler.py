"""Every GPU of a box at once: independent cells run concurrently, each on GPUs of its own.

`amp-suite run --gpus all|N|0,2` names the devices; each running cell holds `spec.gpus` of them
(one, or a DDP cell's world size) and sees only those. Cells start in matrix order as devices
free up; a cell that needs more devices than are free waits, and later cells wait behind it, so
no big cell starves.

Threads only wait on the cells' processes. Everything with side effects (the tracker, the
display, results.jsonl) happens in the caller's thread, through `start` and `finish`, so none of
it needs to be thread-safe and a signal (always delivered to the main thread) stops the whole
run: the threads' cells are cancelled, and nothing they had not finished is recorded.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from amp_suite.config import CellSpec, ConfigError

EVENT_WAIT_S = 0.5  # the main thread wakes this often even when nothing happens (signals, to be safe)


@dataclass(frozen=True)
class GpuSelection:
    """--gpus as given: every visible GPU, the first N, or these indexes."""

    every: bool = False
    first: int | None = None
    indexes: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> GpuSelection:
        """Checks the syntax alone (no torch): all, a count, or comma-separated indexes ("3," is
        GPU 3 alone, as a one-item list: a number alone is a count, as in `docker run --gpus 2`)."""
        value = text.strip()
        if value == "all":
            return cls(every=True)
        parts = [part.strip() for part in value.removesuffix(",").split(",")]
        if not value or not all(part.isdigit() and len(part) <= 4 for part in parts):
            raise ConfigError("--gpus: give all, a number of GPUs (4), or GPU indexes (0,2,3; 3, for GPU 3 alone)")
        if "," not in value:
            count = int(parts[0])
            if count < 1:
                raise ConfigError("--gpus 0: a number alone counts GPUs; for GPU 0 alone give --gpus 0, (a list)")
            return cls(first=count)
        indexes = tuple(int(part) for part in parts)
        if len(set(indexes)) != len(indexes):
            raise ConfigError(f"--gpus: an index repeats in {','.join(parts)}")
        return cls(indexes=indexes)

    def resolve(self, visible: int) -> list[str]:
        """The CUDA indexes to use, given how many GPUs this process sees."""
        if visible == 0:
            raise ConfigError("--gpus: no CUDA GPU is visible to PyTorch; it runs cells on GPUs only")
        if self.every:
            return [str(index) for index in range(visible)]
        if self.first is not None:
            if self.first > visible:
                raise ConfigError(f"--gpus {self.first}: only {visible} GPU(s) are visible")
            return [str(index) for index in range(self.first)]
        missing = [index for index in self.indexes if index >= visible]
        if missing:
            raise ConfigError(f"--gpus: no GPU {missing[0]}; the visible ones are 0 to {visible - 1}")
        return [str(index) for index in self.indexes]


def visible_index(index: str, variable: str) -> str:
    """The index as this process sees it, as the cell's visible-devices `variable` must name it: the
    parent may itself see a subset (CUDA_VISIBLE_DEVICES=4,5 makes our 0 the box's 4)."""
    inherited = [part for part in os.environ.get(variable, "").split(",") if part.strip()]
    return inherited[int(index)].strip() if inherited else index


class DevicePool:
    """Devices not held by a running cell."""

    def __init__(self, devices: Sequence[str]) -> None:
        self.free = list(devices)

    def take(self, count: int) -> tuple[str, ...] | None:
        if count > len(self.free):
            return None
        taken, self.free = tuple(self.free[:count]), self.free[count:]
        return taken

    def give_back(self, devices: Sequence[str]) -> None:
        self.free.extend(devices)


def threads_per_cell(devices: int, cpu_count: int | None = None) -> int:
    """Cells that share the box share its cores: each gets an equal part, so that a cell running
    beside seven others does not spend its time contending for them."""
    return max(1, (cpu_count or os.cpu_count() or 1) // devices)


# launch(spec, the devices it holds, cancelled, progress) -> what `finish` is given
Launch = Callable[[CellSpec, tuple[str, ...], threading.Event, Callable[[str, int, int], None]], object]


class Scheduler:
    """Runs cells on `devices`, as many at once as the devices allow. A device is a name: a CUDA
    index for local GPUs, or a slot of a Ray cluster's capacity."""

    def __init__(self, devices: Sequence[str]) -> None:
        if not devices:
            raise ValueError("the scheduler needs at least one device")
        self.devices = list(devices)

    def run(
        self,
        specs: Sequence[CellSpec],
        start: Callable[[CellSpec, tuple[str, ...]], None],
        launch: Launch,
        finish: Callable[[CellSpec, object], None],
        progress: Callable[[CellSpec, str, int, int], None],
    ) -> None:
        """`launch(spec, devices, cancelled, progress)` runs in a thread; `start`, `finish(spec,
        its result)` and `progress` run in the caller's thread. A cell needing more devices than
        there are must be dealt with by the caller first."""
        too_big = [spec.cell_id for spec in specs if spec.gpus > len(self.devices)]
        if too_big:
            raise ValueError(f"cells need more devices than the scheduler has: {too_big}")
        events: queue.Queue[tuple[str, CellSpec, object]] = queue.Queue()
        cancelled = threading.Event()
        pool, pending, running = DevicePool(self.devices), deque(specs), {}
        executor = ThreadPoolExecutor(max_workers=len(self.devices), thread_name_prefix="amp-suite-cell")
        try:
            while pending or running:
                while pending and (devices := pool.take(pending[0].gpus)) is not None:
                    spec = pending.popleft()
                    start(spec, devices)
                    running[spec.cell_id] = devices
                    self._submit(executor, events, cancelled, launch, spec, devices)
                try:
                    kind, spec, payload = events.get(timeout=EVENT_WAIT_S)
                except queue.Empty:
                    continue
                if kind == "progress":
                    progress(spec, *payload)  # type: ignore[misc]
                    continue
                pool.give_back(running.pop(spec.cell_id))
                finish(spec, payload.result())  # type: ignore[attr-defined]  # a launch's exception raises here
        finally:
            cancelled.set()  # a no-op when every cell has finished
            executor.shutdown(wait=True)  # each cancelled cell's process is stopped within seconds

    def _submit(self, executor, events, cancelled, launch: Launch, spec: CellSpec, devices: tuple[str, ...]) -> None:
        def report(phase: str, done: int, total: int) -> None:
            events.put(("progress", spec, (phase, done, total)))

        future = executor.submit(launch, spec, devices, cancelled, report)
        future.add_done_callback(lambda done: events.put(("done", spec, done)))

