"""Shared pieces of the config models: the error type, the frozen base and the input limits."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator
from pydantic_core import PydanticCustomError

from amp_suite.config.precisions import PRECISIONS
from amp_suite.errors import ConfigError, shorten  # noqa: F401  (re-exported: the config layer raises them)

Precision = Literal[PRECISIONS]  # type: ignore[valid-type]  # Literal unpacks the tuple

# torch.compile as a matrix axis: "off" runs eager; the others are torch.compile's modes
# ("reduce-overhead" captures CUDA graphs). YAML's false/true mean "off"/"default".
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _compile_mode(value: object) -> object:
    return {False: "off", True: "default"}.get(value, value) if isinstance(value, bool) else value


CompileMode = Annotated[Literal[COMPILE_MODES], BeforeValidator(_compile_mode)]  # type: ignore[valid-type]
Device = Literal["cuda", "cpu"]
# diverged: the cell ran, but a step produced inf/NaN outside GradScaler's skip-and-retry.
# oom: the batch did not fit in device memory; interrupted: a stop ended the cell mid-run (its finished
# windows kept, never taken for a result: --resume runs it again)
Status = Literal["ok", "skipped", "failed", "diverged", "oom", "interrupted"]
# Each status spelled once: every module that decides or reads one imports these (tests/test_layout.py).
OK, SKIPPED, FAILED, DIVERGED, OOM, INTERRUPTED = "ok", "skipped", "failed", "diverged", "oom", "interrupted"


class FrozenModel(BaseModel):
    # Every value accepted here is one the suite can run: finite floats, bounded sizes. Strict: a
    # value is taken as the type YAML gave it, one rule for every field, so a boolean is never a
    # count or a rate (lax pydantic reads `steps: true` as 1), nor "4" or 4.0 a whole number.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, strict=True)


# Names end up in file names, MLflow run names and cell ids.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NAME_MAX = 64
# Upper bounds that keep a typo from exhausting memory or time; far above any sensible matrix.
MAX_MATRIX_BYTES = 1 << 20
MAX_YAML_NODES = 100_000  # after expanding aliases: a "billion laughs" file stops here
# The deepest matrix nests a handful of levels (workloads, a workload, its data or a custom entry's
# args); records keep the config a few levels down and are read back to 32 (records.jsonl).
MAX_YAML_DEPTH = 24
MAX_STEPS = 1_000_000
MAX_BATCH = 1 << 16
MAX_SAMPLES = 10_000_000
MAX_DATA_BYTES = 64 << 30  # the training and validation tensors a cell keeps on its device
MAX_PARAMETERS = 4_000_000_000  # weights, gradients and AdamW state: 64 GB in float32
MAX_SEED = 2**32 - 1
# A cell whose throughput varied more than this across windows of its timed steps ((max - min) /
# median), or a speedup whose 95% interval is wider than this either side, is flagged "noisy".
NOISY_SPREAD = 0.10
# The timed steps are measured in this many windows of consecutive steps: each window's throughput
# is one observation of the cell's speed (its spread, and a speedup's interval with a single seed),
# and side by side the windows are the turns the cells of a comparison take (execution.side_by_side).
# Even, so that turns taken in one order and then in the reverse one balance out.
WINDOWS = 6


def turns_before_timing(warmup_steps: int) -> int:
    """Side by side, the warmup steps each cell keeps back for a round of turns before its first
    timed window (half, rounded down): whichever cell times first then starts from the machine the
    others leave, not from seconds of idling while they prepared."""
    return warmup_steps // 2


def window_edges(steps: int, windows: int = WINDOWS) -> list[int]:
    """Where each window of the timed steps begins, then the end: [0, 10, 20, ..., steps]. Fewer
    windows than asked where there are fewer steps (two at least in each: side by side, a turn's
    first step is not timed); the windows differ by at most one step."""
    count = max(1, min(windows, steps // 2))
    return [round(index * steps / count) for index in range(count + 1)]


# A batch size, or "auto": the largest batch that fits, searched per precision (amp_suite.execution.batch_search).
AUTO_BATCH = "auto"


def _batch_size(value: object) -> int | str:
    """One error per bad value, in pydantic's words (a plain union would report one per member)."""
    if value == AUTO_BATCH:
        return AUTO_BATCH
    if isinstance(value, bool) or not isinstance(value, int):
        raise PydanticCustomError("batch_size_type", "Input should be a whole number or 'auto'")
    if value < 1:
        raise PydanticCustomError("greater_than_equal", "Input should be greater than or equal to 1")
    if value > MAX_BATCH:
        raise PydanticCustomError("less_than_equal", "Input should be less than or equal to {le}", {"le": MAX_BATCH})
    return value


BatchSize = Annotated[int | Literal["auto"], PlainValidator(_batch_size)]


def count(upper: int, lower: int = 1, **kwargs):
    return Field(ge=lower, le=upper, **kwargs)
