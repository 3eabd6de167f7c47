"""A GPT-2 style causal LM from Hugging Face transformers, built from a config (no weights fetched)."""

from __future__ import annotations

import math

import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.workloads.base import require, unigram_perplexity, validation_sums
from amp_suite.workloads.tokens import TokenBlocks

transformers = require("transformers", "transformer")


class TransformerWorkload(TokenBlocks):
    primary_metric = "val_perplexity"
    higher_is_better = False

    def cut(self, blocks: torch.Tensor) -> TensorData:
        return TensorData(blocks, blocks)  # a causal LM: the model shifts the labels itself

    def build_model(self, train: TensorData) -> nn.Module:
        c = self.config
        config = transformers.GPT2Config(
            vocab_size=c.vocab_size,
            n_positions=c.seq_len,
            n_embd=c.n_embd,
            n_layer=c.n_layer,
            n_head=c.n_head,
            # No dropout: the comparison between precisions should not hinge on dropout masks.
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,  # GPT-2's 50256 would lie outside a small vocabulary
            eos_token_id=0,
        )
        return transformers.GPT2LMHeadModel(config)

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return model(input_ids=inputs, labels=targets).loss

    def chance_metric(self, validation: TensorData) -> float | None:
        return unigram_perplexity(validation.targets)

    def evaluate(self, model, data, batch_size, context) -> dict[str, float]:
        def sums(inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor]:
            with context():
                loss = self.loss(model, inputs, targets)
            return (loss.float() * len(inputs),)  # every sequence has seq_len - 1 predicted tokens

        (loss_sum,) = validation_sums(model, data, batch_size, sums)
        val_loss = loss_sum / len(data)
        return {"val_loss": val_loss, "val_perplexity": math.exp(val_loss)}


WORKLOAD = TransformerWorkload
