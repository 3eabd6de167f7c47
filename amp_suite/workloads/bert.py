"""A BERT encoder trained by masked-language modelling, from Hugging Face transformers, built from a
config (no weights fetched): BERT-large's shape by default, the model NVIDIA's DeepLearningExamples
publish pretraining throughput for.

The masking is static, drawn once per data set from a fixed seed (as BERT's original pretraining
data was): every precision and seed sees the same masked positions, so parity compares like with
like. A masked position's input is the [MASK] token, the vocabulary's last id, which the data
never holds.
"""

from __future__ import annotations

import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.data.convert import check_vocabulary
from amp_suite.data.generated import DATA_SEED
from amp_suite.workloads.base import require
from amp_suite.workloads.tokens import IGNORED_LABEL, LabelledTokens

transformers = require("transformers", "bert")


class MaskedLMWorkload(LabelledTokens):
    primary_metric = "val_mlm_accuracy"  # the share of masked tokens predicted right

    @property
    def mask_id(self) -> int:
        return self.config.vocab_size - 1

    def data_vocab_size(self) -> int:
        return self.mask_id  # [MASK] is never data

    def cut(self, tokens: torch.Tensor) -> TensorData:
        check_vocabulary(tokens, self.mask_id)  # the last id is [MASK]'s alone
        draws = torch.rand(tokens.shape, generator=torch.Generator().manual_seed(DATA_SEED))
        masked = draws < self.config.mask_fraction
        masked[:, 0] |= ~masked.any(dim=1)  # every sequence has a token to predict
        inputs = tokens.masked_fill(masked, self.mask_id)
        return TensorData(inputs, tokens.masked_fill(~masked, IGNORED_LABEL))  # unmasked: not trained on, not counted

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


WORKLOAD = MaskedLMWorkload
