"""A BERT encoder trained by masked-language modelling, from Hugging Face transformers, built from a
config (no weights fetched): BERT-large's shape by default, the model NVIDIA's DeepLearningExamples
publish pretraining throughput for.

The masking is static, drawn once per data set from a fixed seed (as BERT's original pretraining
data was): every precision and seed sees the same masked positions, so parity compares like with
like. A masked position's input is the [MASK] token, the vocabulary's last id, which the data
never holds.
"""

from __future__ import annotations

from typing import Any

import datasets
import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.data.convert import check_vocabulary, token_tensors
from amp_suite.data.generated import DATA_SEED, markov_corpus
from amp_suite.workloads.base import Workload, require

transformers = require("transformers", "bert")
IGNORED = -100  # the label Hugging Face's loss skips: every position that is not masked


class MaskedLMWorkload(Workload):
    primary_metric = "val_mlm_accuracy"  # the share of masked tokens predicted right

    generator = staticmethod(markov_corpus)

    @property
    def mask_id(self) -> int:
        return self.config.vocab_size - 1

    def generator_params(self) -> dict[str, Any]:
        return {"seq_len": self.config.seq_len, "vocab_size": self.mask_id}  # [MASK] is never data

    def tensors(self, split: datasets.Dataset, limit: int) -> TensorData:
        tokens = token_tensors(split, self.config.seq_len, limit).inputs
        check_vocabulary(TensorData(tokens, tokens), self.mask_id)  # the last id is [MASK]'s alone
        draws = torch.rand(tokens.shape, generator=torch.Generator().manual_seed(DATA_SEED))
        masked = draws < self.config.mask_fraction
        masked[:, 0] |= ~masked.any(dim=1)  # every sequence has a token to predict
        inputs = tokens.masked_fill(masked, self.mask_id)
        return TensorData(inputs, tokens.masked_fill(~masked, IGNORED))

    def check(self, train: TensorData, description: str) -> None:
        check_vocabulary(train, self.config.vocab_size)

    def build_model(self, train: TensorData) -> nn.Module:
        c = self.config
        config = transformers.BertConfig(
            vocab_size=c.vocab_size,
            hidden_size=c.hidden,
            num_hidden_layers=c.n_layer,
            num_attention_heads=c.n_head,
            intermediate_size=4 * c.hidden,
            max_position_embeddings=c.seq_len,
            # No dropout: the comparison between precisions should not hinge on dropout masks.
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        return transformers.BertForMaskedLM(config)

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return model(input_ids=inputs, labels=targets).loss  # cross-entropy over the masked tokens

    @torch.no_grad()
    def evaluate(self, model, data, batch_size, context) -> dict[str, float]:
        model.eval()
        loss_sum = torch.zeros((), device=data.inputs.device)
        correct = torch.zeros((), device=data.inputs.device, dtype=torch.long)
        masked = (data.targets != IGNORED).sum()
        for start in range(0, len(data), batch_size):
            inputs, targets = data.inputs[start : start + batch_size], data.targets[start : start + batch_size]
            with context():
                out = model(input_ids=inputs, labels=targets)
            counted = targets != IGNORED
            loss_sum += out.loss.float() * counted.sum()  # the loss is a mean over this batch's masked tokens
            correct += (out.logits.argmax(dim=-1)[counted] == targets[counted]).sum()
        model.train()
        count = masked.item()  # synchronises: evaluation runs after the timed steps
        return {"val_loss": loss_sum.item() / count, "val_mlm_accuracy": correct.item() / count}


WORKLOAD = MaskedLMWorkload
