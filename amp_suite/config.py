"""Matrix files: validated once at the edge, frozen afterwards. No torch here.

A matrix file names workloads (with their sizes), precision modes, seeds and step counts.
`Matrix.cells()` expands it into one `CellSpec` per (workload, batch size, seed, precision),
ordered so that every precision of one workload configuration runs back to back.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, model_validator

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp16-noscale")
# fp16-noscale (autocast fp16 without GradScaler) is the negative control: it shows the parity
# check can fail when small gradients flush to zero.
Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp16-noscale"]
Device = Literal["cuda", "cpu"]


class ConfigError(ValueError):
    """Bad user input. The message is one line that names the field, the value and the choices."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


DataSource = Literal["synthetic", "digits", "hub", "imagefolder", "text"]


class DataConfig(_Frozen):
    """Where a workload's training and validation data come from. Offline unless source is hub."""

    source: DataSource
    name: str | None = Field(None, description="hub dataset name, e.g. cifar10 or wikitext")
    subset: str | None = Field(None, description="hub dataset configuration, e.g. wikitext-2-raw-v1")
    path: str | None = Field(None, description="local folder (imagefolder) or text file(s) (text)")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="held out when the source has no validation split")
    val_samples: PositiveInt = Field(512, description="validation samples used (generated count for synthetic)")

    @model_validator(mode="after")
    def _location_given(self):
        if self.source == "hub" and not self.name:
            raise ValueError("data.source hub needs data.name (e.g. cifar10)")
        if self.source in ("imagefolder", "text") and not self.path:
            raise ValueError(f"data.source {self.source} needs data.path")
        return self


class _WorkloadBase(_Frozen):
    label: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    batch_sizes: list[PositiveInt] = Field(min_length=1)
    samples: PositiveInt = Field(1024, description="training samples: the generated count, or a cap on real data")
    lr: PositiveFloat = 1e-3
    force: list[Precision] = Field(
        default_factory=list, description="precisions to run even where the hardware is slow at them"
    )

    @property
    def name(self) -> str:
        return self.label or self.workload  # type: ignore[attr-defined]

    @model_validator(mode="after")
    def _enough_samples(self):
        if max(self.batch_sizes) > self.samples:
            raise ValueError(
                f"samples ({self.samples}) must be at least the largest batch size ({max(self.batch_sizes)})"
            )
        return self


class ResNetConfig(_WorkloadBase):
    workload: Literal["resnet"]
    data: DataConfig = DataConfig(source="digits")
    arch: Literal["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"] = "resnet50"
    image_size: int = Field(224, ge=32)
    num_classes: int = Field(1000, ge=2)
    channels_last: bool = True
    lr: PositiveFloat = 0.1

    @model_validator(mode="after")
    def _image_source(self):
        return _check_source(self, ("synthetic", "digits", "hub", "imagefolder"))


class TransformerConfig(_WorkloadBase):
    workload: Literal["transformer"]
    data: DataConfig = DataConfig(source="synthetic")
    n_layer: PositiveInt = 6
    n_embd: PositiveInt = 512
    n_head: PositiveInt = 8
    seq_len: int = Field(256, ge=2)
    vocab_size: int = Field(8192, ge=2)

    @model_validator(mode="after")
    def _consistent(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.data.source in ("hub", "text") and self.vocab_size < 256:
            raise ValueError(f"text is tokenized as bytes: vocab_size must be at least 256 (got {self.vocab_size})")
        return _check_source(self, ("synthetic", "hub", "text"))


class MLPConfig(_WorkloadBase):
    workload: Literal["mlp"]
    data: DataConfig = DataConfig(source="digits")
    in_features: PositiveInt = Field(256, description="input width of generated data (digits have 64)")
    hidden: PositiveInt = 512
    depth: PositiveInt = 4
    num_classes: int = Field(10, ge=2)
    loss_multiplier: PositiveFloat = Field(
        1.0, description="scales the training loss (and so every gradient); <1 pushes gradients toward fp16's floor"
    )
    adam_eps: PositiveFloat = 1e-8

    @model_validator(mode="after")
    def _vector_source(self):
        return _check_source(self, ("synthetic", "digits"))


def _check_source(config, allowed: tuple[str, ...]):
    if config.data.source not in allowed:
        source, workload = config.data.source, config.workload
        raise ValueError(f"data.source {source!r} is not available for {workload}; choose from {allowed}")
    return config


WorkloadConfig = Annotated[Union[ResNetConfig, TransformerConfig, MLPConfig], Field(discriminator="workload")]
WORKLOADS = ("resnet", "transformer", "mlp")


class ParityConfig(_Frozen):
    """AMP passes when its mean validation metric is no worse than fp32's by more than
    max(tolerance x |fp32 mean|, k x fp32's seed-to-seed standard deviation)."""

    tolerance: float = Field(0.02, ge=0, description="relative to fp32's value")
    k: float = Field(2.0, ge=0, description="multiples of fp32's seed-to-seed std (needs repeats >= 2)")


class CellSpec(_Frozen):
    """Everything one cell needs; the same object goes to the worker process and into the record."""

    matrix: str
    workload: WorkloadConfig
    precision: Precision
    batch_size: PositiveInt
    seed: int
    steps: PositiveInt
    warmup_steps: PositiveInt
    max_grad_norm: PositiveFloat
    device: Device
    force: bool = False

    @property
    def cell_id(self) -> str:
        return f"{self.workload.name}/bs{self.batch_size}/seed{self.seed}/{self.precision}"

    @property
    def config_hash(self) -> str:
        """Identifies the resolved configuration, so --resume never reuses a stale record."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:12]


class Matrix(_Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = Field(0, ge=0)
    repeats: PositiveInt = 1
    warmup_steps: PositiveInt = 5
    steps: PositiveInt
    max_grad_norm: PositiveFloat = 1.0
    parity: ParityConfig = ParityConfig()
    precisions: list[Precision] = Field(min_length=1)
    workloads: list[WorkloadConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self):
        names = [w.name for w in self.workloads]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"workload names must be unique; give each a distinct 'label': {duplicated}")
        if len(set(self.precisions)) != len(self.precisions):
            raise ValueError(f"precisions must not repeat: {self.precisions}")
        return self

    def select(self, workloads: list[str] | None, precisions: list[str] | None) -> Matrix:
        """The same matrix restricted to the named workloads and precisions (CLI filters)."""
        kept = self.workloads
        if workloads:
            _check_choices("--workloads", workloads, [w.name for w in self.workloads])
            kept = [w for w in self.workloads if w.name in workloads]
        modes = self.precisions
        if precisions:
            _check_choices("--precisions", precisions, list(self.precisions))
            modes = [p for p in self.precisions if p in precisions]
        return self.model_copy(update={"workloads": kept, "precisions": modes})

    def cells(self, device: Device, force: bool = False) -> list[CellSpec]:
        seeds = [self.seed + r for r in range(self.repeats)]
        return [
            CellSpec(
                matrix=self.name,
                workload=w,
                precision=p,
                batch_size=bs,
                seed=seed,
                steps=self.steps,
                warmup_steps=self.warmup_steps,
                max_grad_norm=self.max_grad_norm,
                device=device,
                force=force or p in w.force,
            )
            for w in self.workloads
            for bs in w.batch_sizes
            for seed in seeds
            for p in self.precisions
        ]


def _check_choices(option: str, given: list[str], valid: list[str]) -> None:
    unknown = [g for g in given if g not in valid]
    if unknown:
        raise ConfigError(f"{option}: unknown {unknown}; this matrix has {valid}")


def load_matrix(path: Path) -> Matrix:
    """Read and validate a matrix file; every problem becomes one ConfigError line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"matrix {path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"matrix {path}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or "unparseable"
        raise ConfigError(f"matrix {path}: malformed YAML{at}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"matrix {path}: expected a mapping of keys at the top, got {type(data).__name__}")
    try:
        return Matrix.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"matrix {path}: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """The first pydantic error as 'field.path: message (got value)', plus a count of the rest."""
    errors = exc.errors()
    first = errors[0]
    loc = [str(part) for part in first["loc"] if part not in WORKLOADS]
    if first["type"] == "union_tag_invalid":
        loc.append("workload")
    location = ".".join(loc) or "matrix"
    message = first["msg"].removeprefix("Value error, ")
    got = first.get("input")
    shown = "" if first["type"] in ("missing",) or isinstance(got, dict) else f" (got {got!r})"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return f"{location}: {message}{shown}{more}"
