"""One backend per kind of device, registered the way trackers are: what the suite does
differently on a CUDA GPU, on a CPU, and on an AMD GPU that ROCm presents as CUDA.

A backend class states its device's facts (the Ray resource a rank holds, DDP's process group,
whether the device is the host's own cores, the variable that narrows the devices a process sees,
...), which the torch-free parent reads by the device type a spec names (`backend_named`) or a
stored record does (`backend_recorded`, which reads a kind it has no backend for as the host's).
An instance is the live device a cell runs on (`backend_of`): the probe, peak memory and its reset,
the step timer, cache clearing, the GPU-state reader, synchronising. Its methods import torch when
called, so the parent reads the facts without loading it. No module outside amp_suite.hardware
compares a device type (tests/test_layout.py): it asks the backend. A new backend is one module
here, listed in BACKEND_MODULES, plus its tests; a device users can name, judged by the article's
rule, also takes its name in config and the CLI, its rule and peaks (docs/development.md, "a kind
of device").

No torch here: a backend's live methods import it when they run.
"""

from __future__ import annotations

import importlib
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

from amp_suite.errors import ConfigError
from amp_suite.records.machine import described

if TYPE_CHECKING:
    import torch

    from amp_suite.instruments.diagnostics.host_syncs import SyncCount
    from amp_suite.instruments.nvml import NvmlDevice
    from amp_suite.instruments.timers import CpuStepTimer, CudaStepTimer
    from amp_suite.records.machine import DeviceCaps


class UnsupportedBackend(ConfigError):
    """A device the suite would misjudge: one line, exit 2 at the CLI; a failed cell in a worker."""


class Backend:
    """A kind of device: its facts on the class, the live device on an instance."""

    type: ClassVar[str]  # torch's device type, as specs and records name it
    is_host: ClassVar[bool]  # the device is the host's own cores: no launch queue, no kernel trace
    ray_resource: ClassVar[str]  # the Ray resource one rank of a cell holds
    process_group: ClassVar[str]  # torch.distributed's backend for DDP on it
    new_process_mb: ClassVar[float]  # what one more process costs on the device before its first tensor
    reports_oom: ClassVar[bool]  # raises torch.OutOfMemoryError, so a batch search can probe it
    autotunes_convolutions: ClassVar[bool]  # cuDNN picks its convolution algorithms in the warmup
    visible_devices: ClassVar[str | None]  # the variable that narrows the devices a process sees
    default_matrix: ClassVar[str]  # the matrix `amp-suite run` runs when none is named
    peak_memory_kind: ClassVar[str]  # what its peak-memory figure is (a record's peak_memory_kind)
    launch_method: ClassVar[str]  # what the host's cost per kernel measures on it, in words ({per_batch}: its batches)

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @classmethod
    def claims(cls, device_type: str) -> bool:
        """Whether this backend drives devices of `device_type` in this process."""
        return device_type == cls.type

    # The live device: each backend's module defines these.
    def caps(self) -> DeviceCaps:
        raise NotImplementedError

    def synchronize(self) -> None:
        raise NotImplementedError

    def release_cached_blocks(self) -> None:
        raise NotImplementedError

    def reset_peak_memory(self) -> str:
        """Start the peak over; returns the peak's kind (a CPU whose high-water mark can't be reset
        says its peak counts from the process's start)."""
        raise NotImplementedError

    def peak_memory_mb(self) -> tuple[float, float | None]:
        """The peak since the reset, and what the allocator reserved at its peak (None: no allocator)."""
        raise NotImplementedError

    def held(self) -> dict[str, float]:
        raise NotImplementedError

    def memory_at_oom(self) -> dict[str, float | str]:
        raise NotImplementedError

    def step_timer(self, steps: int) -> CpuStepTimer | CudaStepTimer:
        raise NotImplementedError

    def gpu_reader(self, nvml: Any = None) -> NvmlDevice | None:
        """NVML's handle on the device (raises where NVML can't open it); None: no GPU to read."""
        raise NotImplementedError

    def host_syncs(self, optimizer: torch.optim.Optimizer) -> AbstractContextManager[SyncCount]:
        raise NotImplementedError

    def device_time_ms(self, work: Any) -> float:
        """The device's own time for `work()`, in ms: a GPU's kernels, or a CPU's ops' own CPU time."""
        raise NotImplementedError

    def compile_blocker(self) -> str | None:
        """Why torch.compile can't build kernels for this device here, or None."""
        raise NotImplementedError

    def missing_devices(self, world_size: int) -> str | None:
        """Why a DDP cell of `world_size` ranks can't run on this machine's devices, or None."""
        return None

    def rank_device(self, local_rank: int) -> torch.device:
        raise NotImplementedError

    def ddp_device_ids(self) -> list[int] | None:
        """DistributedDataParallel's device_ids: the rank's one GPU; None where the module stays put."""
        return None

    def bound_device(self) -> torch.device | None:
        """The device init_process_group binds its communicator to; None: bound to none."""
        return None

    def take_for_rank(self) -> None:
        """Make the device this process's own, as one DDP rank's."""


BACKEND_MODULES = ("rocm", "cuda", "cpu")  # asked in this order: ROCm claims "cuda" before CUDA does
_REGISTRY: list[type[Backend]] = []


def register(cls: type[Backend]) -> type[Backend]:
    _REGISTRY.append(cls)
    return cls


def registered() -> tuple[type[Backend], ...]:
    """Every backend, in the order they are asked: BACKEND_MODULES', then any registered elsewhere."""
    order = {f"{__name__}.{name}": index for index, name in enumerate(BACKEND_MODULES)}
    for module in order:
        importlib.import_module(module)  # registers its backend the first time
    return tuple(sorted(_REGISTRY, key=lambda cls: order.get(cls.__module__, len(order))))


def backend_named(device_type: str) -> type[Backend]:
    """The backend of devices of `device_type` ("cuda", "cpu"), as a spec or a record names it. Its
    facts only: a record read on another machine says nothing of this one's torch build."""
    for cls in registered():
        if cls.type == device_type:
            return cls
    raise ConfigError(f"no backend for device type {device_type!r}; known: {', '.join(known_types())}")


def backend_recorded(device_type: str) -> type[Backend]:
    """The backend whose facts read a stored record's device, as records.machine.described reads
    its kind: one this build has no backend for ("mps", "xpu") reads as the host's own, so a summary
    or a report of it still renders instead of stopping at the first such line."""
    return backend_named(described(device_type).type)


def known_types() -> list[str]:
    return [cls.type for cls in registered()]


def backend_of(device: torch.device | str) -> Backend:
    """The live backend of `device` in this process; raises UnsupportedBackend for a device the
    suite would misjudge (an AMD GPU under ROCm)."""
    import torch

    device = torch.device(device)
    for cls in registered():
        if cls.claims(device.type):
            return cls(device)
    raise ConfigError(f"no backend for device type {device.type!r}; known: {', '.join(known_types())}")
