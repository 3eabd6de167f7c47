"""Which machine a record was measured on, what it does fast, and which records may be pooled.
No torch here.

Throughput depends on the GPU model and on the software stack (driver, CUDA, torch), so those
make up a machine's key. The host does not: two boxes with the same GPU and stack are the same
machine for comparison, and a report pools them (and says how many hosts it pooled). Anything
else stays apart: records of different keys are never averaged together.

What a device does fast follows from what it is, by the AMP article's capability rule: tensor
cores from compute capability 7.0 (fp16), except on the Turing chips built without them; bf16 and
TF32 from 8.0. On a CPU, autocast only pays where the instruction set has the dtype
(avx512_bf16/AMX for bf16, AMX-FP16 for fp16). `hardware.probe` applies the rule to the live
device; a record keeps its result, and a line older than the machine field has it rebuilt here.

The probe also times the host's cost per kernel (instruments.launches): a property of the host,
not of the GPU, so it is kept beside the host's name and, like it, out of the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# CPU feature flags (Linux /proc/cpuinfo names) that mean native arithmetic in that dtype.
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})  # "bf16": AArch64 BF16 extension
# avx512_fp16 alone is not enough for training: on a Xeon with it (and no AMX-FP16), ResNet-18's
# fp16 cell ran 42x slower than fp32 (308 s vs 7.3 s; oneDNN's fp16 convolutions fall back there).
CPU_FP16_FLAGS = frozenset({"amx_fp16", "fphp", "asimdhp"})


# Compute capability 7.5 without tensor cores: NVIDIA's TU116 and TU117 chips carry dedicated
# double-rate fp16 units instead (Turing architecture whitepaper; the GTX 1660 and GTX 1650
# product pages list no tensor cores). Their products: GeForce GTX 16xx, GeForce MX450/MX550, and
# the professional T400, T500, T550, T600, T1000 and T1200.
TURING_WITHOUT_TENSOR_CORES = re.compile(r"\bGTX 16\d\d|\bMX(450|550)\b|\bT(400|500|550|600|1000|1200)\b")


@dataclass(frozen=True)
class DeviceCaps:
    type: str  # "cuda" or "cpu"
    name: str
    capability: tuple[int, int] | None  # CUDA compute capability; None on CPU
    tensor_cores: bool
    fast_fp16: bool
    fast_bf16: bool
    tf32: bool
    host_us_per_kernel: float | None = None  # the probe's measurement (instruments.launches); None: not timed

    @property
    def capability_str(self) -> str | None:
        return f"{self.capability[0]}.{self.capability[1]}" if self.capability else None


def cuda_caps(name: str, capability: tuple[int, int]) -> DeviceCaps:
    no_tensor_core_turing = capability == (7, 5) and bool(TURING_WITHOUT_TENSOR_CORES.search(name))
    ampere_or_newer = capability >= (8, 0)
    return DeviceCaps(
        type="cuda",
        name=name,
        capability=capability,
        tensor_cores=capability >= (7, 0) and not no_tensor_core_turing,
        fast_fp16=capability >= (7, 0),  # tensor cores, or TU116/TU117's double-rate fp16 units
        fast_bf16=ampere_or_newer,
        tf32=ampere_or_newer,
    )


def cpu_caps(name: str, flags: frozenset[str]) -> DeviceCaps:
    return DeviceCaps(
        type="cpu",
        name=name,
        capability=None,
        tensor_cores=False,
        fast_fp16=bool(flags & CPU_FP16_FLAGS),
        fast_bf16=bool(flags & CPU_BF16_FLAGS),
        tf32=False,
    )


# Vendor words that say nothing about the model: "NVIDIA A100-SXM4-80GB" -> "A100-SXM4-80GB".
VENDOR_PREFIXES = ("NVIDIA ", "Tesla ", "Quadro ", "GeForce ")
# Words a CPU's model name carries that tell no model apart: trademarks, "CPU", and the clock.
CPU_FILLER = re.compile(r"\((?:R|TM|tm)\)|\bCPU\b|\bProcessor\b|@\s*[\d.]+\s*GHz")


class Machine(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    device_type: str  # "cuda" or "cpu"
    device_name: str  # as torch reports it (CPU: the model name in /proc/cpuinfo)
    compute_capability: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    host: str | None = None
    threads: int | None = None  # CPU only: the threads torch trains with (VMs share one model name)
    # What the device does fast, by the capability rule (cuda_caps, cpu_caps).
    tensor_cores: bool | None = None
    fast_fp16: bool | None = None
    fast_bf16: bool | None = None
    tf32: bool | None = None
    # The host's time per tiny eager kernel, in microseconds (CUDA: to enqueue it; a CPU: to dispatch
    # the op; instruments.launches). A property of the host, so not in the key; None in records older
    # than the measurement. `amp-suite predict --results` sets a step's host side with it.
    host_us_per_kernel: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False)

    @classmethod
    def describe(cls, caps: DeviceCaps, environment: dict[str, Any]) -> Machine:
        """The machine a cell runs on, from its probed capabilities and environment block."""
        fast = {k: getattr(caps, k) for k in ("tensor_cores", "fast_fp16", "fast_bf16", "tf32")}
        identity = _identity(caps.type, caps.name, caps.capability_str, environment)
        return cls(**identity, **fast, host_us_per_kernel=caps.host_us_per_kernel)

    @classmethod
    def from_environment(cls, device_type: str, environment: dict[str, Any]) -> Machine | None:
        """For records written before they carried a machine: rebuilt from their environment.
        A GPU's capabilities follow from its compute capability; a CPU's flags were not kept."""
        name = environment.get("device_name")
        if not name:
            return None
        capability = environment.get("compute_capability")
        caps = described(device_type).caps_from(name, capability)
        if caps is not None:
            return cls.describe(caps, environment)
        return cls(**_identity(device_type, name, capability, environment))

    @property
    def key(self) -> str:
        """What must match for two records to be pooled: device model and software stack."""
        parts = [self.device_name, self.device_type, *described(self.device_type).stack(self)]
        return " | ".join([*parts, f"torch {self.torch}"])

    @property
    def caps(self) -> DeviceCaps | None:
        """Its capabilities as the capability rule takes them; None where the record did not keep them."""
        fast = (self.tensor_cores, self.fast_fp16, self.fast_bf16, self.tf32)
        if any(flag is None for flag in fast):
            return None
        major, _, minor = (self.compute_capability or "").partition(".")
        capability = (int(major), int(minor or 0)) if major.isdigit() else None
        caps = DeviceCaps(self.device_type, self.device_name, capability, *fast)  # type: ignore[arg-type]
        return replace(caps, host_us_per_kernel=self.host_us_per_kernel)

    @property
    def model_name(self) -> str:
        """The device model without vendor words, as published tables name GPUs."""
        name = self.device_name
        for prefix in VENDOR_PREFIXES:
            name = name.removeprefix(prefix)
        return described(self.device_type).model_name(name)

    @property
    def label(self) -> str:
        """A short column heading: the model, and for a GPU its compute capability."""
        return f"{self.model_name} ({described(self.device_type).qualifier(self)})"


def _identity(device_type: str, name: str, capability: str | None, environment: dict[str, Any]) -> dict[str, Any]:
    """The fields that say which device and software stack (and host) a record ran on."""
    return {
        "device_type": device_type,
        "device_name": name,
        "compute_capability": capability,
        "driver": environment.get("driver"),
        "cuda": None,
        "torch": environment.get("torch"),
        "host": environment.get("hostname"),
        "threads": None,
    } | described(device_type).own_fields(environment)


class RecordedGpu:
    """A CUDA GPU in a record: told apart by its compute capability, driver and CUDA."""

    type = "cuda"

    def caps_from(self, name: str, capability: str | None) -> DeviceCaps | None:
        """Its capabilities by the rule, from a record that kept only its compute capability."""
        if not capability:
            return None
        major, _, minor = str(capability).partition(".")
        return cuda_caps(name, (int(major), int(minor or 0)))

    def stack(self, machine: Machine) -> list[str]:
        return [f"cc {machine.compute_capability}", f"driver {machine.driver}", f"CUDA {machine.cuda}"]

    def model_name(self, name: str) -> str:
        return name

    def qualifier(self, machine: Machine) -> str:
        return f"cc {machine.compute_capability}"

    def own_fields(self, environment: dict[str, Any]) -> dict[str, Any]:
        return {"cuda": environment.get("cuda")}

    def completed(self, machine: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
        """A stored machine with what older versions left out: a GPU's lacks nothing."""
        return machine


class RecordedHost:
    """The host's own CPU in a record: told apart by the threads torch trained with (VMs share one
    model name). A device type this version does not know is described the same way."""

    type = "cpu"

    def caps_from(self, name: str, capability: str | None) -> DeviceCaps | None:
        return None  # a CPU's flags were not kept

    def stack(self, machine: Machine) -> list[str]:
        return [f"{machine.threads} threads"]

    def model_name(self, name: str) -> str:
        """"Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz" -> "Intel Xeon Platinum 8370C"."""
        return " ".join(CPU_FILLER.sub(" ", name).split())

    def qualifier(self, machine: Machine) -> str:
        return f"CPU, {machine.threads} threads" if machine.threads else "CPU"

    def own_fields(self, environment: dict[str, Any]) -> dict[str, Any]:
        return {"threads": environment.get("torch_threads")}

    def completed(self, machine: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
        """A stored machine with its threads, from its environment where it was written before
        machines had them."""
        if machine.get("threads") is not None:
            return machine
        return machine | {"threads": environment.get("torch_threads")}


# How a record describes each kind of device: the records' side of amp_suite.hardware.backends,
# which sits a layer above them and never decides how a stored line reads.
RECORDED = {kind.type: kind for kind in (RecordedGpu(), RecordedHost())}


def described(device_type: str) -> RecordedGpu | RecordedHost:
    return RECORDED.get(device_type, RECORDED[RecordedHost.type])
