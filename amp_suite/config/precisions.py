"""The precision modes, written once, with the traits the analysis reads. No torch here.

amp_suite.cell.precision holds a policy for each mode (and refuses to import when the two lists
disagree); everything else, from the report's claims to the peak table, asks these traits and
never a mode's name, so that a new mode (fp8, say) is one entry here plus its policy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrecisionMode:
    name: str
    math: str  # the datasheet column its matmuls run at (peak FLOPs, for MFU)
    autocast: bool = False  # mixed precision: forward and loss under autocast to a narrower dtype
    loss_scaling: bool = False  # gradients pass through GradScaler
    control: bool = False  # a negative control, there to show the parity check can fail; judged by no claim
    speed_baseline: bool = False  # every row's speedup is also taken against this mode
    reference: bool = False  # the accuracy reference: parity is judged against it
    published_as: tuple[str, ...] = ()  # what published tables call it (NVIDIA's "amp")
    # fp8 training (torchao.float8): linear layers' matmuls in float8 with this scaling recipe
    # ("tensorwise", "rowwise"), the rest under bf16 autocast; it runs compiled.
    fp8_recipe: str | None = None


MODES = (
    PrecisionMode("fp32", "fp32", speed_baseline=True, reference=True),  # TF32 off: true fp32
    PrecisionMode("tf32", "tf32", speed_baseline=True),
    PrecisionMode("fp16", "fp16", autocast=True, loss_scaling=True, published_as=("amp",)),
    PrecisionMode("bf16", "bf16", autocast=True, speed_baseline=True),  # what fp8 must beat to pay
    # autocast fp16 without GradScaler: small gradients flush to zero, and parity should fail.
    PrecisionMode("fp16-noscale", "fp16", autocast=True, control=True),
    PrecisionMode("fp8-tensorwise", "fp8", autocast=True, fp8_recipe="tensorwise"),
    PrecisionMode("fp8-rowwise", "fp8", autocast=True, fp8_recipe="rowwise"),
)
MODE_BY_NAME = {mode.name: mode for mode in MODES}
PRECISIONS = tuple(MODE_BY_NAME)

REFERENCE = next(mode.name for mode in MODES if mode.reference)  # accuracy reference, default speed baseline
SPEED_BASELINES = tuple(mode.name for mode in MODES if mode.speed_baseline)
# What published speedups divide by on a GPU with TF32: the baseline whose matmuls run at TF32.
TF32_BASELINE = next(mode.name for mode in MODES if mode.speed_baseline and mode.math == "tf32")
# What an fp8 mode's speed is also compared with: the mixed precision it would replace.
BF16_BASELINE = next(mode.name for mode in MODES if mode.speed_baseline and mode.math == "bf16")
# What the article's claims judge: autocast to fp16 or bf16 (fp8 is beyond the article).
AMP_MODES = tuple(mode.name for mode in MODES if mode.autocast and not mode.control and not mode.fp8_recipe)
FP8_MODES = tuple(mode.name for mode in MODES if mode.fp8_recipe)
# The modes the article compares: all but the negative control, and fp8, which is beyond it.
ARTICLE_MODES = tuple(mode.name for mode in MODES if not mode.control and not mode.fp8_recipe)
UNSCALED_AMP_MODES = tuple(name for name in AMP_MODES if not MODE_BY_NAME[name].loss_scaling)
CONTROLS = tuple(mode.name for mode in MODES if mode.control)
# The peak table's column an op runs at, by the dtype it ran in (an op profile's); float32 runs at its
# mode's own float32 math: TF32 where the mode is TF32's, the reference's elsewhere.
MATH_OF_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}


REFERENCE_MATH = MODE_BY_NAME[REFERENCE].math


def float32_math(name: str) -> str:
    """The math a mode's float32 ops run at: its own, unless it autocasts (then the reference's)."""
    mode = MODE_BY_NAME[name]
    return REFERENCE_MATH if mode.autocast else mode.math


def precision_order(precision: str) -> int:
    """Where a mode sorts in tables: the order the modes are declared in; unknown ones last."""
    return PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS)


def scaled_counterpart(name: str) -> str | None:
    """For a control without loss scaling, the mode that is the same math with GradScaler."""
    mode = MODE_BY_NAME[name]
    return next((m.name for m in MODES if m.math == mode.math and m.loss_scaling and not m.control), None)


def published_name(name: str) -> str | None:
    """A published table's precision ("amp", "fp32", ...) as this suite's mode, or None."""
    return name if name in MODE_BY_NAME else next((m.name for m in MODES if name in m.published_as), None)
