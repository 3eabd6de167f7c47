"""What a cell measures with: step timers and host CPU time (`timers`), peak memory (`memory`),
the GPU's clocks, power and throttling over the timed region (`gpu_state`, over `nvml`), and the
one-step diagnostics (FLOPs, dtype audit, host syncs, non-finite values, gradient underflow).

The instruments around the timed steps are found from the record's schema: a field declared with
`instrument="NAME"` is filled by `amp_suite.instruments.NAME.INSTRUMENT`, a context manager built
from the live device whose `fields(region)` gives that field. The live device is its backend
(amp_suite.hardware.backends, a layer above): the instruments ask it (`LiveDevice`) where CUDA and
a CPU differ, and never compare a device type themselves. A new measured quantity is therefore its
instrument module plus its field; the measurement pipeline enters every instrument the schema names.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from amp_suite.records.results import CellRecord
from amp_suite.records.schema import instruments_of

if TYPE_CHECKING:
    import torch


class LiveDevice(Protocol):
    """The device as the instruments read it: what amp_suite.hardware.backends.Backend implements."""

    device: torch.device
    is_host: bool  # the host's own cores: no launch queue, no kernel timeline
    peak_memory_kind: str
    launch_method: str

    def synchronize(self) -> None: ...
    def release_cached_blocks(self) -> None: ...
    def reset_peak_memory(self) -> str: ...
    def peak_memory_mb(self) -> tuple[float, float | None]: ...
    def memory_at_oom(self) -> dict[str, float | str]: ...
    def gpu_reader(self, nvml: Any = None) -> Any: ...
    def host_syncs(self, optimizer: torch.optim.Optimizer) -> AbstractContextManager[Any]: ...


@dataclass(frozen=True)
class TimedRegion:
    """What an instrument may need to know of the steps it wrapped, to turn readings into fields."""

    steps: int
    batch_size: int  # this device's

    @property
    def samples(self) -> int:
        return self.steps * self.batch_size


class RegionInstrument(Protocol):
    def __enter__(self) -> RegionInstrument: ...
    def __exit__(self, *exc: object) -> None: ...
    def fields(self, region: TimedRegion) -> dict[str, Any]: ...


def region_instrument(name: str) -> type[RegionInstrument]:
    return importlib.import_module(f"amp_suite.instruments.{name}").INSTRUMENT


def region_instruments() -> tuple[type[RegionInstrument], ...]:
    """Every instrument the record's schema names, in declaration order."""
    return tuple(region_instrument(name) for name in instruments_of(CellRecord))


class Readings:
    """The instruments of one timed region, entered together; their fields once it has ended."""

    def __init__(self, instruments: list[RegionInstrument]) -> None:
        self.instruments = instruments

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the block out of every instrument that can (an evaluation between timed steps).
        Peak memory can't be paused, and need not be: an evaluation keeps no activations for a
        backward pass, so it stays below a training step's peak."""
        with ExitStack() as stack:
            for instrument in self.instruments:
                if hasattr(instrument, "paused"):
                    stack.enter_context(instrument.paused())
            yield

    def fields(self, region: TimedRegion) -> dict[str, Any]:
        return {key: value for instrument in self.instruments for key, value in instrument.fields(region).items()}


@contextmanager
def instrumented(device: LiveDevice, kinds: tuple[type[RegionInstrument], ...] | None = None) -> Iterator[Readings]:
    """`kinds` (default: every instrument the record's schema names) around the `with` block."""
    instruments = [kind(device) for kind in (region_instruments() if kinds is None else kinds)]
    with ExitStack() as stack:
        for instrument in instruments:
            stack.enter_context(instrument)
        yield Readings(instruments)
