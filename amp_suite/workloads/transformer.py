"""A GPT-2 style causal LM from Hugging Face transformers, built from a config (no weights fetched)."""

from __future__ import annotations

import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.workloads.base import Workload, require

transformers = require("transformers", "transformer")

# Each token has only this many likely successors, so the corpus has structure a model can learn.
SUCCESSORS_PER_TOKEN = 4


class TransformerWorkload(Workload):
    def build_model(self) -> nn.Module:
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

    def make_data(self, generator: torch.Generator) -> TensorData:
        c = self.config
        successors = torch.randint(c.vocab_size, (c.vocab_size, SUCCESSORS_PER_TOKEN), generator=generator)
        choices = torch.randint(SUCCESSORS_PER_TOKEN, (c.samples, c.seq_len), generator=generator)
        tokens = torch.empty(c.samples, c.seq_len, dtype=torch.long)
        tokens[:, 0] = torch.randint(c.vocab_size, (c.samples,), generator=generator)
        for position in range(1, c.seq_len):
            tokens[:, position] = successors[tokens[:, position - 1], choices[:, position]]
        return TensorData(tokens, tokens)  # causal LM: the model shifts the labels itself

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return model(input_ids=inputs, labels=targets).loss


WORKLOAD = TransformerWorkload
