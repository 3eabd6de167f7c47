"""`workload: hf`: a Hugging Face transformers model for one task, from a folder holding its
config.json or a Hub id, with random weights unless `pretrained`.

Each task trains as the reference workload of its kind does, on the same data, loss and metric:
the causal LM as GPT-2's (perplexity), the masked LM as BERT's (static masks, [MASK] the last id),
seq2seq as T5's (a block's continuation); sequence classification learns which Markov chain wrote
each sequence (accuracy). Only the model comes from the folder: its config, and its weights where
`pretrained` says so. Token ids stay below `vocab_size` (default: the model's vocabulary).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import torch
from torch import nn

from amp_suite.config.base import MAX_PARAMETERS
from amp_suite.config.workloads import HfConfig, remote_code_refusal
from amp_suite.data import TensorData
from amp_suite.data.convert import check_classes, check_vocabulary, labelled_token_tensors
from amp_suite.data.generated import labelled_markov_corpus
from amp_suite.workloads.base import Classifier, Workload, require
from amp_suite.workloads.bert import MaskedLMWorkload
from amp_suite.workloads.t5 import Seq2SeqWorkload
from amp_suite.workloads.transformer import TransformerWorkload

transformers = require("transformers", "hf")

AUTO_CLASSES = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq-cls": "AutoModelForSequenceClassification",
    "seq2seq": "AutoModelForSeq2SeqLM",
}


# What save_pretrained writes (model.safetensors, or shards of it), or older checkpoints' .bin files.
WEIGHT_FILES = ("*.safetensors", "*.bin")


class HfModelError(ValueError):
    """The model's config can't be loaded, or has no model for the task or the lengths asked."""


def load_model_config(c: HfConfig) -> transformers.PretrainedConfig:
    """The model's config, with the task's labels. Never its code, unless the matrix says
    trust_remote_code: true: a config that names code of its own (auto_map) is refused, and
    transformers is told so outright (left unset, it would ask on stdin, and a `yes |` would answer)."""
    labels = {"num_labels": c.num_labels} if c.task == "seq-cls" else {}
    folder = Path(c.model)
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise HfModelError(f"the folder {folder} holds no config.json (save one with the config's save_pretrained)")
    _refuse_remote_code(c, folder / "config.json" if folder.is_dir() else None)
    try:
        config = transformers.AutoConfig.from_pretrained(c.model, trust_remote_code=c.trust_remote_code, **labels)
    except (OSError, ValueError, KeyError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if folder.is_dir():
            raise HfModelError(f"no model config in {folder}: {reason}") from None
        raise HfModelError(
            f"{c.model!r} is neither a folder beside the matrix nor a Hub model within reach ({reason})"
        ) from None
    if getattr(config, "auto_map", None) and not c.trust_remote_code:  # a Hub id's, read from the Hub
        raise HfModelError(remote_code_refusal(c.model))
    if c.pretrained and folder.is_dir() and not any(any(folder.glob(kind)) for kind in WEIGHT_FILES):
        held = " or ".join(WEIGHT_FILES)
        raise HfModelError(f"pretrained: true, but {folder} holds no weights ({held}); save_pretrained writes them")
    _check_vocabulary(c, config)
    _check_lengths(c, config)
    return config


def _refuse_remote_code(c: HfConfig, config_file: Path | None) -> None:
    """A folder's config.json that has an auto_map, read as text before transformers sees it."""
    if c.trust_remote_code or config_file is None:
        return
    try:
        names_code = "auto_map" in json.loads(config_file.read_bytes())
    except (OSError, ValueError, TypeError):
        return  # not a JSON object: transformers says what is wrong with it
    if names_code:
        raise HfModelError(remote_code_refusal(c.model))


def _check_vocabulary(c: HfConfig, config: transformers.PretrainedConfig) -> None:
    vocab_size = getattr(config, "vocab_size", None)
    if not vocab_size:
        raise HfModelError(f"{config.model_type} takes no token ids (its config has no vocab_size)")
    if c.vocab_size is not None and c.vocab_size > vocab_size:
        raise HfModelError(f"vocab_size {c.vocab_size} is more than the model's {vocab_size}")
    if c.data.source in ("hub", "text") and (c.vocab_size or vocab_size) < 258:
        raise HfModelError(f"text is tokenized as bytes: the model's vocabulary ({vocab_size}) needs 258 ids or more")


def model_class(task: str, config: transformers.PretrainedConfig, remote_from: str | None = None) -> type[nn.Module]:
    """The model class transformers' Auto class maps this config to for the task; with `remote_from`
    (the folder or Hub id, where the matrix trusts its code), the class its auto_map names there."""
    auto = getattr(transformers, AUTO_CLASSES[task])
    named = (getattr(config, "auto_map", None) or {}).get(auto.__name__)
    if remote_from is not None and named:
        from transformers.dynamic_module_utils import get_class_from_dynamic_module

        return get_class_from_dynamic_module(named, remote_from)
    if type(config) not in auto._model_mapping:
        known = f"{auto.__name__} has none for {type(config).__name__}"
        raise HfModelError(f"{config.model_type} has no {task} model ({known})")
    return auto._model_mapping[type(config)]


def checked_size(c: HfConfig, config: transformers.PretrainedConfig) -> type[nn.Module]:
    """The task's model class, once a model of it built from `config` on the meta device (which
    allocates nothing) has no more parameters than the limit every workload has: a 70B config
    is refused here, not by the host's OOM killer."""
    model_class_ = model_class(c.task, config, c.model if c.trust_remote_code else None)
    with torch.device("meta"):
        counted = model_class_(config)
    parameters = sum(parameter.numel() for parameter in counted.parameters())
    if parameters > MAX_PARAMETERS:
        raise HfModelError(f"the model has {parameters:.2e} parameters; the limit is {MAX_PARAMETERS:.0e}")
    return model_class_


def _check_lengths(c: HfConfig, config: transformers.PretrainedConfig) -> None:
    longest = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    lengths = {"seq_len": c.seq_len} | ({"target_len": c.target_len} if c.task == "seq2seq" else {})
    for field, length in lengths.items():
        if longest and length > longest:
            raise HfModelError(f"{field} {length} is more than the model's {longest} positions")


class HfModel(Workload):
    """What every task shares: the model's config, read once per cell, and the model built from it.
    Listed first among a task's bases, so its model replaces the reference workload's."""

    def __init__(self, config: HfConfig, channels_last: bool = False) -> None:
        self.model_config = load_model_config(config)
        self.prepare_model_config(self.model_config)
        # The data's ids and the reference workloads' [MASK] follow the vocabulary used.
        vocab_size = config.vocab_size or self.model_config.vocab_size
        super().__init__(config.model_copy(update={"vocab_size": vocab_size}), channels_last)

    def prepare_model_config(self, model_config: transformers.PretrainedConfig) -> None:
        """Settings the task's training needs that a checkpoint's config may lack."""

    def build_model(self, train: TensorData) -> nn.Module:
        c = self.config
        model_class_ = checked_size(c, self.model_config)
        if c.pretrained:
            # fp32 weights whatever the checkpoint holds: autocast chooses each op's precision, and
            # from_pretrained would otherwise keep a bf16 checkpoint's dtype in every mode.
            return model_class_.from_pretrained(
                c.model, config=self.model_config, dtype=torch.float32, trust_remote_code=c.trust_remote_code
            )
        return model_class_(self.model_config).to(torch.float32)  # initialised from the cell's seed


class CausalLM(HfModel, TransformerWorkload):
    pass


class MaskedLM(HfModel, MaskedLMWorkload):
    pass


class Seq2Seq(HfModel, Seq2SeqWorkload):
    def lengths(self) -> tuple[int, int]:
        return self.config.seq_len, self.config.target_len

    def prepare_model_config(self, model_config: transformers.PretrainedConfig) -> None:
        # The decoder's first input; a config without one would fail on its first labels.
        if getattr(model_config, "decoder_start_token_id", None) is None:
            model_config.decoder_start_token_id = getattr(model_config, "pad_token_id", None) or 0


class SequenceClassifier(HfModel, Classifier):
    """Which of num_labels Markov chains wrote a sequence. The last id is the padding id where the
    config has none (decoder models classify at the last token that is not padding): the data
    never holds it, so every position counts."""

    generator = staticmethod(labelled_markov_corpus)

    def prepare_model_config(self, model_config: transformers.PretrainedConfig) -> None:
        if getattr(model_config, "pad_token_id", None) is None:
            model_config.pad_token_id = model_config.vocab_size - 1

    def generator_params(self) -> dict[str, Any]:
        c = self.config
        return {"seq_len": c.seq_len, "vocab_size": c.vocab_size - 1, "num_classes": c.num_labels}

    def tensors(self, split: datasets.Dataset, limit: int) -> TensorData:
        return labelled_token_tensors(split, self.config.seq_len, limit)

    def check(self, train: TensorData, description: str) -> None:
        check_classes(train, self.config.num_labels, description)
        check_vocabulary(train.inputs, self.config.vocab_size)

    def logits(self, model: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        return model(input_ids=inputs).logits


TASKS: dict[str, type[HfModel]] = {
    "causal-lm": CausalLM, "masked-lm": MaskedLM, "seq-cls": SequenceClassifier, "seq2seq": Seq2Seq,
}  # fmt: skip


def WORKLOAD(config: HfConfig, channels_last: bool = False) -> HfModel:  # noqa: N802 (the registry's name)
    return TASKS[config.task](config, channels_last)
