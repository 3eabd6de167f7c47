"""A T5 encoder-decoder trained on a sequence-to-sequence loss, from Hugging Face transformers,
built from a config (no weights fetched): t5-base's shape by default, the model of the community
precision benchmark in huggingface/transformers#15026.

Each sample is one block of tokens cut in two: the encoder reads the source, the decoder learns
to continue it (teacher-forced, as a translation model learns its target). Data has fixed
lengths: the cells keep it on the device, and every precision sees the same tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.workloads.base import require
from amp_suite.workloads.tokens import LabelledTokens

transformers = require("transformers", "t5")


class Seq2SeqWorkload(LabelledTokens):
    primary_metric = "val_token_accuracy"  # the share of target tokens predicted right (every one is labelled)

    def lengths(self) -> tuple[int, int]:
        """Tokens per sample the encoder reads and the decoder predicts."""
        return self.config.source_len, self.config.target_len

    def block_len(self) -> int:
        return sum(self.lengths())

    def cut(self, blocks: torch.Tensor) -> TensorData:
        source_len = self.lengths()[0]
        return TensorData(blocks[:, :source_len].contiguous(), blocks[:, source_len:].contiguous())

    def build_model(self, train: TensorData) -> nn.Module:
        c = self.config
        config = transformers.T5Config(
            vocab_size=c.vocab_size,
            d_model=c.d_model,
            d_kv=c.d_model // c.n_head,
            d_ff=c.d_ff,
            num_layers=c.n_layer,
            num_heads=c.n_head,
            # No dropout: the comparison between precisions should not hinge on dropout masks.
            dropout_rate=0.0,
            # The decoder starts from id 0, T5's pad; no position is padding here, so none is ignored.
            decoder_start_token_id=0,
            pad_token_id=0,
        )
        return transformers.T5ForConditionalGeneration(config)


WORKLOAD = Seq2SeqWorkload
