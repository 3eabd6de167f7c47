"""Precision modes as small policy objects; the training loop calls the same methods for all.

The base class *is* the fp32 policy: no autocast, plain backward and step. Subclasses override
only what differs (the shape of Lightning Fabric's precision plugins):

    fp32   float32 math, TF32 off for matmul and cuDNN for the whole cell
    tf32   float32 tensors, TF32 tensor-core math on (compute capability >= 8.0)
    bf16   autocast(bfloat16) around forward + loss; plain backward and step
    fp16   autocast(float16) + GradScaler: scale -> backward, unscale_ before clipping, step, update
           (a fused optimizer takes the inf/NaN flag into its kernel: no host sync in step)
    fp16-noscale  autocast(float16) without a scaler: the negative control for the parity check
    fp8-tensorwise, fp8-rowwise  torchao's float8 training: linear layers swapped for Float8Linear
           (their matmuls in float8, scaled per tensor or per row), the rest under bf16 autocast;
           compiled only (compute capability >= 8.9; row-wise >= 9.0)
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import ModuleType

import torch
from torch import nn

from amp_suite.config.precisions import MODE_BY_NAME, PRECISIONS
from amp_suite.hardware.backends import backend_named
from amp_suite.records.machine import DeviceCaps

# Every backend switch that can make "float32" mean TF32 (or bf16 on CPUs with AMX), in torch's
# fp32_precision API: the generic default, each backend's default, then each op (later ones win).
_FP32_MATH_SWITCHES = (
    ("generic", lambda: torch.backends),
    ("cudnn", lambda: torch.backends.cudnn),
    ("mkldnn", lambda: torch.backends.mkldnn),
    ("cuda.matmul", lambda: torch.backends.cuda.matmul),
    ("cudnn.conv", lambda: torch.backends.cudnn.conv),
    ("cudnn.rnn", lambda: torch.backends.cudnn.rnn),
    ("mkldnn.matmul", lambda: torch.backends.mkldnn.matmul),
    ("mkldnn.conv", lambda: torch.backends.mkldnn.conv),
    ("mkldnn.rnn", lambda: torch.backends.mkldnn.rnn),
)


@contextmanager
def fp32_math(mode: str) -> Iterator[dict[str, str]]:
    """Set float32 math to "ieee" or "tf32" on every backend, restoring the old values on exit.

    torch keeps the legacy flags (float32_matmul_precision, cudnn.allow_tf32) beside the
    fp32_precision API, and its legacy getters raise ("a mix of the legacy and new APIs") when
    the two disagree. Inductor calls those getters while autotuning, and reads the cuDNN backend's
    own default for its conv templates, so every one of them is set, and set alike."""
    legacy = _legacy_flags()
    switches = [(name, get()) for name, get in _FP32_MATH_SWITCHES]
    saved = [switch.fp32_precision for _, switch in switches]
    try:
        _set_legacy_flags("high" if mode == "tf32" else "highest", mode == "tf32")
        for _, switch in switches:
            switch.fp32_precision = mode
        yield {name: switch.fp32_precision for name, switch in switches}
    finally:
        if legacy is not None:
            _set_legacy_flags(*legacy)
        for (_, switch), value in zip(switches, saved, strict=True):
            switch.fp32_precision = value


def _legacy_flags() -> tuple[str, bool] | None:
    """(float32 matmul precision, cuDNN allow_tf32), or None where they already disagree with the
    new API (then only the new API's values are restored)."""
    try:
        return torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    except RuntimeError:
        return None


def _set_legacy_flags(matmul_precision: str, cudnn_tf32: bool) -> None:
    torch.set_float32_matmul_precision(matmul_precision)
    torch.backends.cudnn.allow_tf32 = cudnn_tf32


SCALE_DROP_WARNING = 2  # loss-scale drops in the second half of a run that raise the warning flag


class PrecisionPolicy:
    """fp32: the reference every other mode is compared with."""

    name = "fp32"
    compute_dtype = torch.float32
    fp32_math_mode = "ieee"
    skips_nonfinite_steps = False  # True where inf/NaN gradients are routine (a GradScaler skips them)
    swaps_layers = False  # convert_module replaces layers (fp8's Float8Linear): the model trained is not as written

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type

    def unsupported_reason(self, caps: DeviceCaps) -> str | None:
        """Why this device can't run the mode well, or None. Callers skip rather than substitute."""
        return None

    def unsupported_compile(self, compile: str) -> str | None:
        """Why this mode should not run in this torch.compile mode ("off": eager), or None."""
        return None

    def numerics(self) -> AbstractContextManager[dict[str, str]]:
        """Global float32 math settings for the whole cell (restored afterwards)."""
        return fp32_math(self.fp32_math_mode)

    def convert_module(self, model: nn.Module) -> nn.Module:
        """The model this mode trains, on its device, before the optimizer sees its parameters: a
        mode that swaps layers (fp8's, say) returns the swapped model. Autocast modes train it as is."""
        return model

    def bind(self, optimizer: torch.optim.Optimizer) -> None:
        """Called once with the optimizer before the first step."""

    def forward_context(self) -> AbstractContextManager[object]:
        return nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Make .grad hold true gradients before clipping; nothing to do without a scaler."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def telemetry(self) -> dict[str, object]:
        """Scaler state after training (reads device values: call outside the timed region)."""
        return {}

    def checked_matmul_dtype(self, device: torch.device) -> torch.dtype:
        """The dtype a matmul produces under this policy, which must be its compute dtype: proof
        that autocast is in effect (or not, in fp32 and tf32) before anything is measured."""
        observed = observed_matmul_dtype(self, device)
        if observed != self.compute_dtype:
            raise RuntimeError(f"{self.name} expected matmuls in {self.compute_dtype}, got {observed}")
        return observed


class TF32(PrecisionPolicy):
    name = "tf32"
    fp32_math_mode = "tf32"

    def unsupported_reason(self, caps: DeviceCaps) -> str | None:
        if caps.tf32:
            return None
        where = f"compute capability {caps.capability_str}" if caps.capability else "a CPU"
        return f"TF32 needs an NVIDIA GPU of compute capability >= 8.0; this is {where}"


class Autocast(PrecisionPolicy):
    """Autocast around forward + loss; gradients and optimizer state stay float32."""

    def forward_context(self) -> AbstractContextManager[object]:
        return torch.autocast(device_type=self.device_type, dtype=self.compute_dtype)


class BF16(Autocast):
    name = "bf16"
    compute_dtype = torch.bfloat16

    def unsupported_reason(self, caps: DeviceCaps) -> str | None:
        if caps.fast_bf16:
            return None
        if not backend_named(caps.type).is_host:
            return f"bf16 needs compute capability >= 8.0; this GPU is {caps.capability_str}"
        return "this CPU has no native bf16 instructions (avx512_bf16/AMX): bf16 would be emulated"


class FP16(Autocast):
    """fp16 needs loss scaling: small gradients flush to zero in float16 without it."""

    name = "fp16"
    compute_dtype = torch.float16
    skips_nonfinite_steps = True

    def __init__(self, device_type: str, scaler: torch.amp.GradScaler | None = None) -> None:
        super().__init__(device_type)
        self.scaler = scaler  # made in bind(), so checking requirements has no side effects
        self._scale_history: list[torch.Tensor] = []
        self._found_inf_history: list[list[torch.Tensor]] = []
        self._initial_scale = 0.0

    def unsupported_reason(self, caps: DeviceCaps) -> str | None:
        if caps.fast_fp16:
            return None
        if not backend_named(caps.type).is_host:
            return f"fp16 tensor cores need compute capability >= 7.0; this GPU is {caps.capability_str}"
        return "this CPU has no AMX-FP16 (or ARM fp16) units: fp16 training would be emulated or slow"

    def bind(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            self.scaler = torch.amp.GradScaler(self.device_type)
        if not self.scaler.is_enabled():  # GradScaler turns itself off without CUDA; never run unscaled
            raise RuntimeError(f"GradScaler is disabled on {self.device_type}; fp16 would run without loss scaling")
        self._initial_scale = float(self.scaler.get_scale())  # no sync: the scale tensor doesn't exist yet

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # For torch's default optimizers, step() reads the inf/NaN flag on the host before it decides
        # to step: a CPU-GPU sync, the cost of scaling. A fused optimizer (_step_supports_amp_scaling)
        # takes the flag into its kernel instead, which leaves the parameters as they were when it is
        # set: no sync. Its step() always runs, so skipped steps are counted from the flags.
        self.scaler.step(optimizer)
        self._found_inf_history.append(_found_inf(self.scaler, optimizer))  # before update() drops them
        self.scaler.update()
        # Keep the scale tensor itself (a device-side copy); get_scale() would sync once more.
        self._scale_history.append(self.scaler._scale.detach().clone())

    def skipped_steps(self) -> int:
        """Steps whose gradients held inf/NaN, which the optimizer did not apply (synchronises once)."""
        if not self._found_inf_history:
            return 0
        per_step = torch.stack([torch.stack(flags).amax() for flags in self._found_inf_history])
        return int((per_step > 0).sum().item())  # synchronises: telemetry is read after the timed steps

    def telemetry(self) -> dict[str, object]:
        history = torch.stack(self._scale_history).tolist() if self._scale_history else []  # synchronises
        drops = [later < earlier for earlier, later in zip([self._initial_scale, *history], history, strict=False)]
        return {
            "loss_scale": history[-1] if history else self._initial_scale,
            "skipped_steps": self.skipped_steps(),
            "loss_scale_curve": history,
            "loss_scale_drops": sum(drops),
            # A healthy run drops a few times early while it finds its scale, then settles (and
            # grows every 2000 clean steps). Drops that keep coming in the second half of the run
            # mean persistent overflow: something in the model produces inf in fp16.
            "loss_scale_warning": sum(drops[len(drops) // 2 :]) >= SCALE_DROP_WARNING,
        }


def _found_inf(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The inf/NaN flags unscale_ left for this step, one per device (1.0: a gradient was not
    finite): what step() decided by, in either path. Device tensors, fresh each step: keeping
    them costs no sync, and no launch."""
    return list(scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"].values())


class FP16NoScale(Autocast):
    """fp16 autocast with plain backward: gradients below fp16's range silently become zero."""

    name = "fp16-noscale"
    compute_dtype = torch.float16
    unsupported_reason = FP16.unsupported_reason


class FP8(BF16):
    """torchao's float8 training: every linear layer whose sizes fit float8's matmul (multiples of
    16) becomes a Float8Linear, whose forward and backward matmuls run in float8 through
    torch._scaled_mm with the recipe's scales; the rest of forward + loss stays under bf16 autocast,
    as torchao trains. Weights, gradients and optimizer state stay float32."""

    min_capability = (8, 9)  # float8 tensor cores: Ada and Hopper on
    swaps_layers = True

    def __init__(self, device_type: str) -> None:
        super().__init__(device_type)
        self.converted: list[str] = []  # the linear layers now Float8Linear
        self.left_out: list[str] = []  # linear layers whose sizes float8's matmul can't take

    @property
    def recipe(self) -> str:
        """torchao's scaling recipe: the mode's trait (config.precisions), "tensorwise" or "rowwise"."""
        return MODE_BY_NAME[self.name].fp8_recipe or ""

    def unsupported_reason(self, caps: DeviceCaps) -> str | None:
        floor = _dotted(self.min_capability)
        needs = f"fp8 training ({self.recipe}) needs an NVIDIA GPU of compute capability >= {floor}"
        if backend_named(caps.type).is_host:  # torch._scaled_mm runs on a CPU, in software
            return f"{needs}; this is a CPU, whose float8 matmuls run in software"
        if caps.capability is None or caps.capability < self.min_capability:
            return f"{needs}; this GPU is {caps.capability_str}"
        if importlib.util.find_spec("torchao") is None:
            return "fp8 training needs torchao (pip install torchao), which is not installed"
        return None

    def unsupported_compile(self, compile: str) -> str | None:
        if compile == "off":
            return (
                "fp8 training runs under torch.compile (torchao's casts and scales fuse there; eager it is"
                " slower than bf16 by design): give this workload compile: [default]"
            )
        return None

    def convert_module(self, model: nn.Module) -> nn.Module:
        self.converted, self.left_out = [], []
        return self._convert(model, self._fits_and_count)

    def _convert(self, model: nn.Module, fits) -> nn.Module:
        float8 = _torchao_float8()
        # A layer's in and out sizes are multiples of 16 (`_fits_float8`), but the weight gradient's
        # matmul runs over the tokens: (out x tokens) by (tokens x in), and CUDA's _scaled_mm refuses
        # an inner size that is not a multiple of 16 (an MLP at batch 8, the diagnostics' quarter
        # batches). torchao pads that inner size with zeros, which leaves the product unchanged.
        config = dataclasses.replace(float8.Float8LinearConfig.from_recipe_name(self.recipe), pad_inner_dim=True)
        return float8.convert_to_float8_training(model, config=config, module_filter_fn=fits)

    def _fits_and_count(self, module: nn.Module, name: str) -> bool:
        if isinstance(module, nn.Linear):
            (self.converted if _fits_float8(module) else self.left_out).append(name)
        return _fits_float8(module)

    def checked_matmul_dtype(self, device: torch.device) -> torch.dtype:
        """Proof of fp8: a Float8Linear's forward under this policy must reach torch._scaled_mm with
        float8 operands (a layer left in bf16, or a recipe that fell back, would not)."""
        from amp_suite.instruments.diagnostics.scaled_mm import scaled_matmuls

        probe = self._convert(nn.Linear(FP8_ALIGNMENT, FP8_ALIGNMENT, device=device), lambda module, _: True)
        with scaled_matmuls() as seen, self.forward_context():
            probe(torch.ones(FP8_ALIGNMENT, FP8_ALIGNMENT, device=device))
        if not seen.float8:
            calls = f"torch._scaled_mm calls: {seen.calls}"
            raise RuntimeError(f"{self.name}: no float8 matmul ran on {device.type} ({calls})")
        return getattr(torch, seen.float8[0][0])

    def telemetry(self) -> dict[str, object]:
        return {"fp8_layers": len(self.converted), "fp8_layers_left_out": self.left_out}


class FP8TensorWise(FP8):
    name = "fp8-tensorwise"


class FP8RowWise(FP8):
    name = "fp8-rowwise"
    min_capability = (9, 0)  # its float8 matmul with row-wise scales: Hopper on


FP8_ALIGNMENT = 16  # torch._scaled_mm takes float8 operands whose sizes are multiples of 16


def _fits_float8(module: nn.Module) -> bool:
    """A linear layer float8's matmul can take (an output head of 10 classes can't)."""
    return (
        isinstance(module, nn.Linear)
        and module.in_features % FP8_ALIGNMENT == 0
        and module.out_features % FP8_ALIGNMENT == 0
    )


def _torchao_float8() -> ModuleType:
    """torchao's float8 training, imported on first use: two seconds that only fp8 cells pay."""
    return importlib.import_module("torchao.float8")


def _dotted(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


POLICIES: dict[str, type[PrecisionPolicy]] = {
    policy.name: policy for policy in (PrecisionPolicy, TF32, FP16, BF16, FP16NoScale, FP8TensorWise, FP8RowWise)
}
if set(POLICIES) != set(PRECISIONS):  # a mode the config accepts must have a policy, and only those
    raise ImportError(f"precision policies {sorted(POLICIES)} do not match config.PRECISIONS {sorted(PRECISIONS)}")


def make_policy(name: str, device_type: str) -> PrecisionPolicy:
    try:
        return POLICIES[name](device_type)
    except KeyError:
        raise ValueError(f"unknown precision {name!r}; choose from {sorted(POLICIES)}") from None


def observed_matmul_dtype(policy: PrecisionPolicy, device: torch.device) -> torch.dtype:
    """The dtype a matmul actually produces under the policy: proof that autocast is in effect."""
    probe = torch.ones(8, 8, device=device)
    with policy.forward_context():
        return (probe @ probe).dtype
