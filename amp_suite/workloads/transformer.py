"""A GPT-2 style causal LM from Hugging Face transformers, built from a config (no weights fetched)."""

from __future__ import annotations

import math
from typing import Any

import datasets
import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.data.convert import check_vocabulary, token_tensors
from amp_suite.data.generated import markov_corpus
from amp_suite.workloads.base import SourcedWorkload, in_batches, require

transformers = require("transformers", "transformer")


class TransformerWorkload(SourcedWorkload):
    primary_metric = "val_perplexity"
    higher_is_better = False

    generator = staticmethod(markov_corpus)

    def generator_params(self) -> dict[str, Any]:
        return {"seq_len": self.config.seq_len, "vocab_size": self.config.vocab_size}

    def tensors(self, split: datasets.Dataset, limit: int) -> TensorData:
        return token_tensors(split, self.config.seq_len, limit)

    def check(self, train: TensorData, description: str) -> None:
        check_vocabulary(train.inputs, self.config.vocab_size)

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

    @torch.no_grad()
    def evaluate(self, model, data, batch_size, context) -> dict[str, float]:
        model.eval()
        loss_sum = torch.zeros((), device=data.inputs.device)
        for inputs, _ in in_batches(data, batch_size):
            with context():
                loss = self.loss(model, inputs, inputs)
            loss_sum += loss.float() * len(inputs)  # every sequence has seq_len - 1 predicted tokens
        model.train()
        val_loss = loss_sum.item() / len(data)  # synchronises: after the timed region
        return {"val_loss": val_loss, "val_perplexity": math.exp(val_loss)}


WORKLOAD = TransformerWorkload
