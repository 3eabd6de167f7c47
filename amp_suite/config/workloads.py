"""Workload configs: what each reference workload can be sized to, and where its data may come from.

The registry of workloads is WORKLOAD_CONFIGS: each config class names the module that trains it
(imported on first use), its data sources, its throughput unit and its metric's label, so adding a
workload is one class here, listed there, plus its module. This module stays torch-free: reports
read configs (amp_suite.config.recorded reads a record's back).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    BeforeValidator,
    Field,
    JsonValue,
    PositiveFloat,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from amp_suite.config.base import (
    AUTO_BATCH,
    MAX_DATA_BYTES,
    MAX_PARAMETERS,
    MAX_SAMPLES,
    MAX_STEPS,
    NAME_MAX,
    NAME_PATTERN,
    BatchSize,
    CompileMode,
    FrozenModel,
    Precision,
    count,
)
from amp_suite.config.ddp import DdpCell, DdpConfig
from amp_suite.config.entries import declared_source, source_digest


def _as_list(value: object) -> object:
    """`channels_last: true` on a workload means the one-value list [true]."""
    return [value] if isinstance(value, (bool, str)) else value


# "entry": a user workload's own data, from its entry (amp_suite.workloads.custom).
DataSource = Literal["synthetic", "digits", "hub", "imagefolder", "text", "entry"]


class DataConfig(FrozenModel):
    """Where a workload's training and validation data come from. Offline unless source is hub."""

    source: DataSource
    name: str | None = Field(None, max_length=256, description="hub dataset name, e.g. cifar10 or wikitext")
    subset: str | None = Field(None, max_length=256, description="hub dataset configuration, e.g. wikitext-2-raw-v1")
    path: str | None = Field(None, max_length=4096, description="local folder (imagefolder) or text file (text)")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="held out when the source has no validation split")
    val_samples: int = count(MAX_SAMPLES, default=512, description="validation samples used (generated count)")

    @model_validator(mode="after")
    def _location_given(self):
        if self.source == "hub" and not self.name:
            raise ValueError("data.source hub needs data.name (e.g. cifar10)")
        if self.source in ("imagefolder", "text") and not self.path:
            raise ValueError(f"data.source {self.source} needs data.path")
        return self


class TargetConfig(FrozenModel):
    """The validation quality a run must reach, for time to target: a value of the workload's primary
    metric, or a fraction of the quality fp32's runs end at (as MLPerf derives targets from reference
    runs). Cells evaluate every `eval_every` steps, outside the timed steps."""

    value: float | None = Field(None, description="the primary metric to reach (a ceiling for lower-is-better)")
    of_fp32: float | None = Field(
        None, gt=0, le=1, description="this fraction of fp32's mean final metric (lower-is-better: divided by it)"
    )
    eval_every: int = count(MAX_STEPS, default=10, description="steps between evaluations of the validation set")

    @model_validator(mode="after")
    def _one_target(self):
        if (self.value is None) == (self.of_fp32 is None):
            raise ValueError("target needs exactly one of value (e.g. 0.90) or of_fp32 (e.g. 0.99)")
        return self

    def describe(self, metric: str) -> str:
        """The target in words: "val_accuracy 0.9", or "99% of fp32's val_accuracy"."""
        return f"{metric} {self.value:.4g}" if self.value is not None else f"{self.of_fp32:.0%} of fp32's {metric}"


class _WorkloadBase(FrozenModel):
    module: ClassVar[str]  # the amp_suite.workloads module that builds and trains it (its WORKLOAD)
    data_sources: ClassVar[tuple[DataSource, ...]]  # where its data may come from
    throughput_unit: ClassVar[str] = "samples/s"  # the unit people quote this kind of model in
    # The short name tables give its validation metric (its module's primary_metric); None: the
    # metric's own name, without val_ (a user's entry names its metric).
    metric_label: ClassVar[str | None]
    image_inputs: ClassVar[bool] = False  # 4-D inputs through convolutions: the channels_last axis applies
    reference: ClassVar[bool]  # one of the suite's own (smoke and gpu-check cover each); False: the user's
    kernel_benchmark: ClassVar[bool] = False  # a benchmark of kernels, not a training run (timed by the GPU alone)

    label: str | None = Field(None, pattern=NAME_PATTERN, max_length=NAME_MAX)
    batch_sizes: list[BatchSize] = Field(
        min_length=1, max_length=32, description="sizes, and/or auto: the largest that fits, per precision"
    )
    samples: int = count(MAX_SAMPLES, default=1024, description="training samples: generated, or a cap on real data")
    lr: PositiveFloat = 1e-3
    force: list[Precision] = Field(
        default_factory=list, description="precisions to run even where the hardware is slow at them"
    )
    # The matrix's axes, for this workload only (None: the matrix's lists).
    compile: Annotated[list[CompileMode] | None, BeforeValidator(_as_list)] = Field(None, min_length=1)
    channels_last: Annotated[list[bool] | None, BeforeValidator(_as_list)] = Field(None, min_length=1)
    ddp: DdpConfig | None = Field(None, description="run data-parallel: world sizes and comm hooks (axes)")
    target: TargetConfig | None = Field(None, description="the validation quality to reach: time to target")
    fused_optimizer: bool = Field(
        False,
        description="true: the optimizer's fused kernel (torch.optim's fused=True; AdamW, and the ResNet's SGD),"
        " the whole update in one launch per group of tensors, and under fp16 no host sync in GradScaler.step"
        " (an entry that builds its own optimizer must build it fused). false, the default: torch's own"
        " choice, foreach kernels on CUDA and a loop over the parameters on a CPU",
    )

    @model_serializer(mode="wrap")
    def _without_unset_blocks(self, handler):
        """No `ddp` or `target` key when there is no such block, and no `fused_optimizer` key for
        torch's default optimizer: configs, hashes and setups of other cells stay as they were."""
        data = handler(self)
        if isinstance(data, dict):
            for block in ("ddp", "target"):
                if getattr(self, block) is None:
                    data.pop(block, None)
            if not self.fused_optimizer:
                data.pop("fused_optimizer", None)
        return data

    @property
    def fixed_batch_sizes(self) -> list[int]:
        return [size for size in self.batch_sizes if size != AUTO_BATCH]

    @property
    def name(self) -> str:
        return self.label or self.workload  # type: ignore[attr-defined]

    @property
    def uses_hub(self) -> bool:
        """Whether its cells reach for the Hugging Face Hub (else a run keeps every library offline)."""
        return self.data.source == "hub"  # type: ignore[attr-defined]

    def sample_bytes(self) -> int:
        """Bytes of one training or validation sample as the cell keeps it on the device."""
        raise NotImplementedError

    def units_per_sample(self) -> int:
        """How many of `throughput_unit`'s items one training sample holds."""
        return 1

    def parametercount(self) -> int:
        """The model's parameters, estimated from the config."""
        raise NotImplementedError

    @model_validator(mode="after")
    def _enough_samples(self):
        sizes = self.fixed_batch_sizes
        if sizes and max(sizes) > self.samples:
            raise ValueError(f"samples ({self.samples}) must be at least the largest batch size ({max(sizes)})")
        for axis in ("batch_sizes", "compile", "channels_last"):
            values = getattr(self, axis) or []
            if len(set(values)) != len(values):
                raise ValueError(f"{axis} must not repeat: {values}")
        if self.ddp is not None and AUTO_BATCH in self.batch_sizes:
            raise ValueError("ddp cells need fixed batch sizes (batch_sizes auto searches one device, not a group)")
        if self.ddp is not None and self.target is not None:
            raise ValueError("target: time to target is measured on one device; a ddp workload can't declare one")
        if True in (self.channels_last or []) and not self.image_inputs:
            raise ValueError(f"channels_last applies to image workloads; {self.workload} has no 4-D inputs")  # type: ignore[attr-defined]
        return self

    def ddp_cells(self) -> list[DdpCell | None]:
        """This workload's places on the DDP axes; [None] (one plain cell) without a ddp block."""
        return self.ddp.cells() if self.ddp is not None else [None]

    def layouts(self, matrix_layouts: list[bool]) -> list[bool]:
        """This workload's memory layouts (channels_last or not): its own list, else the matrix's
        where the axis applies (image inputs), else the one layout it has."""
        return self.channels_last or (matrix_layouts if self.image_inputs else [False])

    @model_validator(mode="after")
    def _known_source(self):
        if self.data.source not in self.data_sources:  # type: ignore[attr-defined]
            source, workload = self.data.source, self.workload  # type: ignore[attr-defined]
            raise ValueError(f"data.source {source!r} is not available for {workload}; choose from {self.data_sources}")
        return self

    @model_validator(mode="after")
    def _fits_in_memory(self):
        data_bytes = (self.samples + self.data.val_samples) * self.sample_bytes()  # type: ignore[attr-defined]
        if data_bytes > MAX_DATA_BYTES:
            raise ValueError(
                f"samples and data.val_samples would keep {data_bytes / 2**30:,.0f} GiB of data on the device;"
                f" the limit is {MAX_DATA_BYTES >> 30} GiB"
            )
        if self.parametercount() > MAX_PARAMETERS:
            raise ValueError(
                f"the model would have ~{self.parametercount():.2e} parameters; the limit is {MAX_PARAMETERS:.0e}"
            )
        return self


class _ReferenceWorkload(_WorkloadBase):
    reference: ClassVar[bool] = True
    # Its step is mostly matmuls and convolutions, at sizes where its fp32 step is not launch-bound:
    # where the report judges the tensor-core claims (an MLP's tiny matmuls measure launches instead).
    matmul_heavy: ClassVar[bool] = False


class _UserWorkload(_WorkloadBase):
    """A model the suite does not ship: named from a library, or the user's own entry."""

    reference: ClassVar[bool] = False

    matmul_heavy: bool | None = Field(
        None,
        description="whether its step is mostly matmuls and convolutions (the tensor-core claims judge it);"
        " unset: measured, from the share of its FLOPs in them",
    )


class _NamedImageModel(_UserWorkload):
    """An image classification model a library builds by its name, randomly initialised with
    num_classes outputs, trained on the ResNet's image sources. `amp-suite run` checks the name
    before any cell (amp_suite.cli.preflight), where torch may be imported."""

    data_sources: ClassVar[tuple[DataSource, ...]] = ("synthetic", "digits", "hub", "imagefolder")
    throughput_unit: ClassVar[str] = "images/s"
    metric_label: ClassVar[str | None] = "acc"
    image_inputs: ClassVar[bool] = True

    data: DataConfig = DataConfig(source="digits")
    model: str = Field(pattern=r"^[a-z][a-z0-9_.]*$", max_length=NAME_MAX, description="the model's name")
    image_size: int = count(1024, lower=32, default=224)
    num_classes: int = count(100_000, lower=2, default=1000)

    @property
    def name(self) -> str:
        return self.label or self.model

    def sample_bytes(self) -> int:
        return 3 * self.image_size**2 * 4  # float32 RGB

    def parametercount(self) -> int:
        return 0  # the model's own: known once the library builds it


class ResNetConfig(_ReferenceWorkload):
    module: ClassVar[str] = "amp_suite.workloads.resnet"
    data_sources: ClassVar[tuple[DataSource, ...]] = ("synthetic", "digits", "hub", "imagefolder")
    throughput_unit: ClassVar[str] = "images/s"
    metric_label: ClassVar[str | None] = "acc"
    image_inputs: ClassVar[bool] = True
    matmul_heavy: ClassVar[bool] = True

    workload: Literal["resnet"]
    data: DataConfig = DataConfig(source="digits")
    arch: Literal["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"] = "resnet50"
    image_size: int = count(1024, lower=32, default=224)
    num_classes: int = count(100_000, lower=2, default=1000)
    lr: PositiveFloat = 0.1

    def sample_bytes(self) -> int:
        return 3 * self.image_size**2 * 4  # float32 RGB

    def parametercount(self) -> int:
        # torchvision's sizes without the classifier (60M for resnet152), plus the classifier.
        features = 512 if self.arch in ("resnet18", "resnet34") else 2048
        return 60_000_000 + features * self.num_classes


class TorchvisionConfig(_NamedImageModel):
    """Any classification model torchvision lists (torchvision.models.list_models(module=
    torchvision.models): vit_b_16, efficientnet_b0, convnext_tiny, mobilenet_v3_small, ...)."""

    module: ClassVar[str] = "amp_suite.workloads.vision"

    workload: Literal["torchvision"]


class TimmConfig(_NamedImageModel):
    """Any model timm lists (timm.list_models(): vit_small_patch16_224, resnet50d, convnext_nano,
    ...); timm is an optional extra (pip install 'amp-suite[timm]'; the image has it)."""

    module: ClassVar[str] = "amp_suite.workloads.timm_models"

    workload: Literal["timm"]


class TransformerConfig(_ReferenceWorkload):
    module: ClassVar[str] = "amp_suite.workloads.transformer"
    data_sources: ClassVar[tuple[DataSource, ...]] = ("synthetic", "hub", "text")
    throughput_unit: ClassVar[str] = "tokens/s"
    metric_label: ClassVar[str | None] = "ppl"  # perplexity
    matmul_heavy: ClassVar[bool] = True

    workload: Literal["transformer"]
    data: DataConfig = DataConfig(source="synthetic")
    n_layer: int = count(256, default=6)
    n_embd: int = count(1 << 16, default=512)
    n_head: int = count(1024, default=8)
    seq_len: int = count(1 << 17, lower=2, default=256)
    vocab_size: int = count(1 << 20, lower=2, default=8192)

    def sample_bytes(self) -> int:
        return (self.seq_len + 1) * 8  # int64 token ids

    def units_per_sample(self) -> int:
        return self.seq_len  # every position is a next-token prediction

    def parametercount(self) -> int:
        return 12 * self.n_layer * self.n_embd**2 + (self.vocab_size + self.seq_len) * self.n_embd

    @model_validator(mode="after")
    def _consistent(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.data.source in ("hub", "text") and self.vocab_size < 256:
            raise ValueError(f"text is tokenized as bytes: vocab_size must be at least 256 (got {self.vocab_size})")
        return self


class MaskedLMConfig(_ReferenceWorkload):
    """A BERT encoder trained by masked-language modelling (BERT-large's shape by default)."""

    module: ClassVar[str] = "amp_suite.workloads.bert"
    data_sources: ClassVar[tuple[DataSource, ...]] = ("synthetic", "hub", "text")
    throughput_unit: ClassVar[str] = "sequences/s"  # as NVIDIA publishes BERT pretraining
    metric_label: ClassVar[str | None] = "mlm acc"  # the masked tokens predicted right
    matmul_heavy: ClassVar[bool] = True

    workload: Literal["bert"]
    data: DataConfig = DataConfig(source="synthetic")
    n_layer: int = count(256, default=24)
    hidden: int = count(1 << 16, default=1024)
    n_head: int = count(1024, default=16)
    seq_len: int = count(1 << 14, lower=2, default=128)
    vocab_size: int = count(1 << 20, lower=3, default=30522, description="the last id is [MASK]")
    mask_fraction: float = Field(0.15, gt=0, lt=1, description="share of tokens masked (static, seeded)")
    lr: PositiveFloat = 1e-4

    def sample_bytes(self) -> int:
        return 2 * self.seq_len * 8  # int64 inputs and labels

    def parametercount(self) -> int:
        return 12 * self.n_layer * self.hidden**2 + (self.vocab_size + self.seq_len + 2) * self.hidden

    @model_validator(mode="after")
    def _consistent(self):
        if self.hidden % self.n_head:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by n_head ({self.n_head})")
        if self.data.source in ("hub", "text") and self.vocab_size < 258:
            least = f"vocab_size must be at least 258 (got {self.vocab_size})"
            raise ValueError(f"text is tokenized as bytes, and [MASK] takes the last id: {least}")
        return self


class Seq2SeqConfig(_ReferenceWorkload):
    """A T5 encoder-decoder trained on a sequence-to-sequence loss (t5-base's shape by default): each
    sample's target is the continuation of its source."""

    module: ClassVar[str] = "amp_suite.workloads.t5"
    data_sources: ClassVar[tuple[DataSource, ...]] = ("synthetic", "hub", "text")
    throughput_unit: ClassVar[str] = "samples/s"  # as Hugging Face's Trainer reports seq2seq training
    metric_label: ClassVar[str | None] = "token acc"  # the target tokens predicted right
    matmul_heavy: ClassVar[bool] = True

    workload: Literal["t5"]
    data: DataConfig = DataConfig(source="synthetic")
    n_layer: int = count(256, default=12, description="encoder layers, and as many decoder layers")
    d_model: int = count(1 << 16, default=768)
    d_ff: int = count(1 << 18, default=3072)
    n_head: int = count(1024, default=12)
    source_len: int = count(1 << 14, default=96, description="encoder tokens per sample")
    target_len: int = count(1 << 14, default=96, description="decoder tokens per sample, predicted")
    vocab_size: int = count(1 << 20, lower=2, default=32128)
    lr: PositiveFloat = 1e-4

    def sample_bytes(self) -> int:
        return (self.source_len + self.target_len) * 8  # int64 token ids

    def parametercount(self) -> int:
        # Per layer: the encoder's attention (4 d^2) and the decoder's self- and cross-attention
        # (8 d^2), two feed-forward blocks (2 d d_ff each); one embedding shared with the LM head.
        return self.n_layer * (12 * self.d_model**2 + 4 * self.d_model * self.d_ff) + self.vocab_size * self.d_model

    @model_validator(mode="after")
    def _consistent(self):
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.data.source in ("hub", "text") and self.vocab_size < 256:
            raise ValueError(f"text is tokenized as bytes: vocab_size must be at least 256 (got {self.vocab_size})")
        return self


class MLPConfig(_ReferenceWorkload):
    module: ClassVar[str] = "amp_suite.workloads.mlp"
    data_sources: ClassVar[tuple[DataSource, ...]] = ("synthetic", "digits")
    metric_label: ClassVar[str | None] = "acc"

    workload: Literal["mlp"]
    data: DataConfig = DataConfig(source="digits")
    in_features: int = count(1 << 20, default=256, description="input width of generated data (digits have 64)")
    hidden: int = count(1 << 16, default=512)
    depth: int = count(256, default=4)
    num_classes: int = count(100_000, lower=2, default=10)
    loss_multiplier: PositiveFloat = Field(
        1.0, description="scales the training loss (and so every gradient); <1 pushes gradients toward fp16's floor"
    )
    adam_eps: PositiveFloat = 1e-8

    def sample_bytes(self) -> int:
        return self.in_features * 4

    def parametercount(self) -> int:
        return self.in_features * self.hidden + (self.depth - 1) * self.hidden**2 + self.hidden * self.num_classes


class Float8LinearBenchmarkConfig(_WorkloadBase):
    """torchao's float8 single-linear microbenchmark (amp_suite.cell.float8_benchmark), the program
    behind its published H100 speedups (references/torchao-float8.yaml): LayerNorm -> Linear ->
    Sigmoid in bfloat16, a forward and a backward of one M x K input, M the batch size. Not a
    training run: no data, no optimizer, nothing learned, so no accuracy to judge. Timed as the sum
    of its GPU kernels' times (on a CPU, of its ops' CPU times), which no host can bend. Its bf16 is
    the model in bfloat16, as published, not autocast; its fp8 modes swap the Linear for torchao's
    Float8Linear."""

    module: ClassVar[str] = "amp_suite.cell.float8_benchmark"
    data_sources: ClassVar[tuple[DataSource, ...]] = ("synthetic",)
    throughput_unit: ClassVar[str] = "rows/s"  # rows of the M x K input through forward and backward
    metric_label: ClassVar[str | None] = None
    reference: ClassVar[bool] = True  # the suite's own, but a benchmark: gpu-check runs it, smoke does not
    matmul_heavy: ClassVar[bool] = False  # a microbenchmark: the article's training claims don't judge it
    kernel_benchmark: ClassVar[bool] = True
    # What it compares: the published bf16 side and torchao's float8 recipes.
    precisions: ClassVar[tuple[str, ...]] = ("bf16", "fp8-tensorwise", "fp8-rowwise")

    workload: Literal["torchao-float8-linear"]
    data: DataConfig = DataConfig(source="synthetic", val_samples=1)
    in_features: int = count(1 << 16, default=2048, description="K: the Linear's input width")
    out_features: int = count(1 << 16, default=1024, description="N: the Linear's output width")
    samples: int = count(MAX_SAMPLES, default=1 << 16, description="unused: M, the batch size, is the rows")

    @property
    def name(self) -> str:
        return self.label or f"{self.workload}-{self.in_features}x{self.out_features}"

    def sample_bytes(self) -> int:
        return self.in_features * 2  # one bfloat16 row of the input

    def parametercount(self) -> int:
        return self.in_features * self.out_features


def _name_from(path: str, fallback: str) -> str:
    """A cell name from a path's last part: what NAME_PATTERN allows, other characters as '-'."""
    stem = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in stem).lstrip("_.-")[:NAME_MAX]
    return cleaned or fallback


def _folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        seen = path.read_bytes() if path.name == "config.json" else f"{stat.st_size}:{stat.st_mtime_ns}".encode()
        digest.update(f"{path.relative_to(folder)}\0".encode() + seen + b"\0")
    return digest.hexdigest()[:16]


MAX_CONFIG_JSON_BYTES = 16 << 20  # a model's config.json is a few KB; larger is not one to read here


def _json_keys(path: Path) -> set[str]:
    """The top-level keys of a JSON object file; none where it is not one (transformers says why)."""
    try:
        if path.stat().st_size > MAX_CONFIG_JSON_BYTES:
            return set()
        loaded = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return set()
    return set(loaded) if isinstance(loaded, dict) else set()


def remote_code_refusal(model: str) -> str:
    """Why a model whose config has an auto_map is not loaded (amp_suite.workloads.hf says it too)."""
    return (
        f"{model}: its config.json has an auto_map, naming Python code of its own that the suite does not"
        " run unless the workload says trust_remote_code: true (see docs/your-own-model.md)"
    )


HfTask = Literal["causal-lm", "masked-lm", "seq-cls", "seq2seq"]
# The unit each task's people quote, and its metric's label, as the reference workloads of the same kind have.
HF_TASK_UNITS: dict[str, str] = {
    "causal-lm": "tokens/s", "masked-lm": "sequences/s", "seq-cls": "sequences/s", "seq2seq": "samples/s",
}  # fmt: skip
HF_TASK_METRIC_LABELS: dict[str, str] = {
    "causal-lm": "ppl",
    "masked-lm": "mlm acc",
    "seq-cls": "acc",
    "seq2seq": "token acc",
}


FINE_TUNE_LR = 1e-4  # an hf model's learning rate where its weights are loaded (pretrained: true)


class HfConfig(_UserWorkload):
    """A Hugging Face transformers model for one task (AutoModelForCausalLM, ...ForMaskedLM,
    ...ForSequenceClassification, ...ForSeq2SeqLM), from a local folder holding its config.json or
    a Hub id, built from its config with random weights unless `pretrained`. Token data comes from
    the reference workloads' sources, shaped for the task: the causal LM as GPT-2's, the masked LM
    as BERT's, seq2seq as T5's; sequence classification learns which of num_labels Markov chains
    wrote each sequence. `amp-suite run` loads each config before any cell (amp_suite.cli.preflight)."""

    module: ClassVar[str] = "amp_suite.workloads.hf"
    data_sources: ClassVar[tuple[DataSource, ...]] = ("synthetic", "hub", "text")

    workload: Literal["hf"]
    model: str = Field(min_length=1, max_length=4096, description="a folder with config.json, or a Hub id")
    task: HfTask = "causal-lm"
    pretrained: bool = Field(False, description="load the weights (a folder's, or the Hub's) instead of random ones")
    data: DataConfig = DataConfig(source="synthetic")
    seq_len: int = count(1 << 17, lower=2, default=128, description="tokens per sample (seq2seq: the source's)")
    target_len: int = count(1 << 14, default=32, description="seq2seq: decoder tokens per sample, predicted")
    num_labels: int = count(100_000, lower=2, default=2, description="seq-cls: classes")
    mask_fraction: float = Field(0.15, gt=0, lt=1, description="masked-lm: share of tokens masked (static, seeded)")
    vocab_size: int | None = Field(
        None, ge=3, le=1 << 20, description="token ids in the data stay below it; unset: the model's vocabulary"
    )
    # From random weights, AdamW at 1e-4 did not move a tiny Llama off chance in 60 steps (perplexity
    # 7,286 against the labels' frequencies' 6,670); at 1e-3 it reached 2,301. Weights that already
    # learned are fine-tuned at the customary 1e-4.
    lr: PositiveFloat = Field(1e-3, description="AdamW's; unset: 1e-3 from random weights, 1e-4 with pretrained: true")
    trust_remote_code: bool = Field(
        False,
        exclude_if=lambda trusted: not trusted,
        description="true: run the Python code the folder (or Hub repo) names in its config's auto_map, in"
        " amp-suite's own process and in every cell, like a script of yours; false, the default: a config"
        " with an auto_map is refused",
    )

    folder_digest: str | None = Field(
        None, description="set by the suite: a digest of the model folder's files (--resume reruns a changed one)"
    )

    @model_validator(mode="before")
    @classmethod
    def _lr_for_the_weights(cls, data: Any) -> Any:
        if isinstance(data, dict) and "lr" not in data and data.get("pretrained") is True:
            return {**data, "lr": FINE_TUNE_LR}
        return data

    @field_validator("model")
    @classmethod
    def _folder_beside_the_matrix(cls, model: str, info: ValidationInfo) -> str:
        """A folder beside the matrix is taken before a Hub id of the same name, as transformers'
        from_pretrained does with the working directory; a path that names no folder is refused."""
        folder = (info.context or {}).get("matrix_dir")
        if folder is None:
            return model  # a record read back: its folder was resolved when it ran
        local = Path(folder) / Path(model).expanduser()
        if local.is_dir():
            return str(local.resolve())
        if model.startswith((".", "/", "~")) or model.count("/") > 1:
            raise ValueError(f"no folder {local} (a folder with the model's config.json, or a Hub id: org/name)")
        return model

    @model_validator(mode="after")
    def _digest_of_the_folder(self, info: ValidationInfo):
        """What the folder holds, in the config and so in its hash: the config's text, and each
        other file's name, size and modification time (weights are too large to read for this)."""
        if (info.context or {}).get("matrix_dir") is not None and Path(self.model).is_dir():
            object.__setattr__(self, "folder_digest", _folder_digest(Path(self.model)))
        return self

    @model_validator(mode="after")
    def _no_code_unless_asked(self, info: ValidationInfo):
        """A folder whose config names code of its own (auto_map) runs only where the matrix says
        trust_remote_code: true: refused here, from the file's text, before transformers reads it."""
        config = Path(self.model) / "config.json"
        if (info.context or {}).get("matrix_dir") is not None and not self.trust_remote_code and config.is_file():
            if "auto_map" in _json_keys(config):
                raise ValueError(remote_code_refusal(self.model))
        return self

    @property
    def throughput_unit(self) -> str:  # type: ignore[override]
        return HF_TASK_UNITS[self.task]

    @property
    def metric_label(self) -> str:  # type: ignore[override]
        return HF_TASK_METRIC_LABELS[self.task]

    @property
    def uses_hub(self) -> bool:
        return super().uses_hub or not Path(self.model).is_dir()  # a Hub id: its config, and weights

    def units_per_sample(self) -> int:
        return self.seq_len if self.task == "causal-lm" else 1  # every position is a next-token prediction

    @property
    def name(self) -> str:
        """The label, else the folder's or the Hub id's last part (./tiny-llama -> tiny-llama)."""
        return self.label or _name_from(self.model, "hf")

    def sample_bytes(self) -> int:
        return (self.seq_len + (self.target_len if self.task == "seq2seq" else self.seq_len)) * 8  # int64 ids

    def parametercount(self) -> int:
        return 0  # the model's own: known once transformers builds it

    @model_validator(mode="after")
    def _data_for_the_task(self):
        if self.task == "seq-cls" and self.data.source != "synthetic":
            raise ValueError("seq-cls learns from generated sequences (data.source synthetic); for labelled data"
                             " of your own, use workload: custom")  # fmt: skip
        if self.data.source in ("hub", "text") and self.vocab_size is not None and self.vocab_size < 258:
            raise ValueError(f"text is tokenized as bytes: vocab_size must be at least 258 (got {self.vocab_size})")
        return self


# A user's entry: a module's function (my_pkg.models:build) or a file's (models/cnn.py:build).
ENTRY_PATTERN = r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|[^:]+\.py):[A-Za-z_][A-Za-z0-9_]*$"


class CustomConfig(_UserWorkload):
    """The user's own model: a function that returns an amp_suite.UserWorkload (its model, data,
    loss and metric), called in each cell's process with `args`. A file entry is resolved against
    the matrix file's folder when the matrix is loaded (amp_suite.config.loading)."""

    module: ClassVar[str] = "amp_suite.workloads.custom"
    data_sources: ClassVar[tuple[DataSource, ...]] = ("entry",)
    metric_label: ClassVar[str | None] = None  # the entry names its metric (UserWorkload.metric_name)

    workload: Literal["custom"]
    entry: str = Field(
        pattern=ENTRY_PATTERN, max_length=4096, description="module:function, or path/to/file.py:function"
    )
    args: dict[str, JsonValue] = Field(default_factory=dict, description="keyword arguments for the entry")
    samples: int = count(MAX_SAMPLES, default=MAX_SAMPLES, description="a cap on the entry's training samples")
    unit: str = Field("samples/s", pattern=r"^[A-Za-z][A-Za-z0-9 _-]*/s$", max_length=NAME_MAX,
                      description="the throughput unit: what a training sample is, per second")  # fmt: skip
    data: DataConfig = DataConfig(source="entry", val_samples=MAX_SAMPLES)

    source_digest: str | None = Field(
        None,
        exclude_if=lambda digest: digest is None,
        description="set by the suite: a digest of the entry's source file and the Python files beside it"
        " (--resume reruns a changed one)",
    )

    @field_validator("entry")
    @classmethod
    def _file_beside_the_matrix(cls, entry: str, info: ValidationInfo) -> str:
        """A relative file entry names a file beside the matrix (load_matrix passes its folder)."""
        where, function = entry.rsplit(":", 1)
        folder = (info.context or {}).get("matrix_dir")
        if where.endswith(".py") and folder is not None and not Path(where).is_absolute():
            return f"{(Path(folder) / where).resolve()}:{function}"
        return entry

    @model_validator(mode="after")
    def _a_declared_builder(self, info: ValidationInfo):
        """A matrix being loaded names code to run: only a function its source declares a workload
        builder, never the standard library's, read without importing anything (config.entries).
        Its source's digest goes into the config, and so into the hash --resume compares. A record
        read back (no matrix_dir) names code that already ran: it is taken as written."""
        if (info.context or {}).get("matrix_dir") is not None:
            source = declared_source(self.entry)  # an EntryRefused is a ValueError: one line, exit 2
            object.__setattr__(self, "source_digest", source_digest(source))
        return self

    @property
    def throughput_unit(self) -> str:  # type: ignore[override]
        return self.unit

    @property
    def name(self) -> str:
        """The label, else the entry's file or module name (models/cnn.py:build -> cnn)."""
        where = self.entry.rsplit(":", 1)[0]
        return self.label or _name_from(where.removesuffix(".py").rsplit(".", 1)[-1], "custom")

    def sample_bytes(self) -> int:
        return 0  # the entry's data: unknown until a cell builds it

    def parametercount(self) -> int:
        return 0


# The registry: the reference workloads, then models by name and the user's own.
WORKLOAD_CONFIGS = (
    ResNetConfig, TransformerConfig, MaskedLMConfig, Seq2SeqConfig, MLPConfig,
    TorchvisionConfig, TimmConfig, HfConfig, CustomConfig, Float8LinearBenchmarkConfig,
)  # fmt: skip
WorkloadConfig = Annotated[Union[WORKLOAD_CONFIGS], Field(discriminator="workload")]  # type: ignore[valid-type]
WORKLOADS = tuple(config.model_fields["workload"].annotation.__args__[0] for config in WORKLOAD_CONFIGS)
WORKLOAD_CONFIG_BY_NAME = dict(zip(WORKLOADS, WORKLOAD_CONFIGS, strict=True))  # the traits of a record's workload
# The suite's own: its training workloads (smoke trains each), and its kernel benchmarks (gpu-check runs each).
KERNEL_BENCHMARKS = tuple(name for name, config in WORKLOAD_CONFIG_BY_NAME.items() if config.kernel_benchmark)
REFERENCE_WORKLOADS = tuple(
    name for name, config in WORKLOAD_CONFIG_BY_NAME.items() if config.reference and not config.kernel_benchmark
)
