"""Language models on token ids (GPT-2, BERT, T5 and the Hugging Face tasks shaped as theirs): the
data are fixed-length blocks of tokens, generated Markov text or text encoded as bytes, and each
workload cuts its inputs and targets from the blocks."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import datasets
import torch
from torch import nn

from amp_suite.data import TensorData
from amp_suite.data.convert import check_vocabulary, token_tensors
from amp_suite.data.generated import markov_corpus
from amp_suite.workloads.base import SourcedWorkload, commonest_share, validation_sums

IGNORED_LABEL = -100  # the label Hugging Face's losses skip


class TokenBlocks(SourcedWorkload):
    """Blocks of `block_len()` tokens whose ids stay below the config's vocab_size."""

    generator = staticmethod(markov_corpus)

    def block_len(self) -> int:
        """Tokens per block, the inputs' and the targets' together."""
        return self.config.seq_len

    def data_vocab_size(self) -> int:
        """Ids the data may hold; a workload may keep the last ones for itself ([MASK])."""
        return self.config.vocab_size

    @abstractmethod
    def cut(self, blocks: torch.Tensor) -> TensorData:
        """The inputs and targets the model learns from, cut from int64 blocks [N, block_len()]."""

    def generator_params(self) -> dict[str, Any]:
        return {"seq_len": self.block_len(), "vocab_size": self.data_vocab_size()}

    def tensors(self, split: datasets.Dataset, limit: int) -> TensorData:
        return self.cut(token_tensors(split, self.block_len(), limit).inputs)

    def check(self, train: TensorData, description: str) -> None:
        check_vocabulary(train.inputs, self.config.vocab_size)
        check_vocabulary(train.targets, self.config.vocab_size)  # IGNORED_LABEL is below any


class LabelledTokens(TokenBlocks):
    """A Hugging Face model whose forward takes input_ids and labels and returns its loss and
    logits (masked LM, seq2seq). Validation counts the labelled tokens predicted right; positions
    labelled IGNORED_LABEL are neither trained on nor counted."""

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return model(input_ids=inputs, labels=targets).loss  # cross-entropy over the labelled tokens

    def chance_metric(self, validation: TensorData) -> float | None:
        return commonest_share(validation.targets[validation.targets != IGNORED_LABEL])

    def evaluate(self, model, data, batch_size, context) -> dict[str, float]:
        def sums(inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
            with context():
                out = model(input_ids=inputs, labels=targets)
            counted = targets != IGNORED_LABEL
            loss_sum = out.loss.float() * counted.sum()  # the loss is a mean over this batch's labelled tokens
            return loss_sum, (out.logits.argmax(dim=-1)[counted] == targets[counted]).sum()

        loss_sum, correct = validation_sums(model, data, batch_size, sums)
        count = (data.targets != IGNORED_LABEL).sum().item()  # synchronises: evaluation runs after the timed steps
        return {"val_loss": loss_sum / count, self.primary_metric: correct / count}
