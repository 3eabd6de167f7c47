"""Offline datasets that need no network: scikit-learn's bundled digits and generated sets.

Every set here is learnable (fp32 gets well above chance within a few hundred samples) yet not
trivially so, so a real precision problem would move the validation metric. All of them come
from a fixed data seed, independent of the run's seed: repeats vary initialisation and batch
order, not the dataset.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

DATA_SEED = 1234
SUCCESSORS_PER_TOKEN = 4  # each token has few likely successors: structure a model can learn


def digits() -> dict[str, np.ndarray]:
    """The 1,797 8x8 handwritten digits that ship inside scikit-learn, scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return {"image": (bunch.images / 16.0).astype(np.float32), "label": bunch.target.astype(np.int64)}


def class_patterns(samples: int, num_classes: int, size: int) -> dict[str, np.ndarray]:
    """Images of smooth class-specific colour patterns under strong pixel noise."""
    generator = torch.Generator().manual_seed(DATA_SEED)
    labels = torch.randint(num_classes, (samples,), generator=generator)
    patterns = torch.randn(num_classes, 3, 4, 4, generator=generator)
    patterns = F.interpolate(patterns, size=size, mode="bilinear", align_corners=False)
    noise = 2.0 * torch.randn(samples, 3, size, size, generator=generator)
    return {"image": (patterns[labels] + noise).numpy(), "label": labels.numpy()}


def teacher_vectors(samples: int, in_features: int, num_classes: int) -> dict[str, np.ndarray]:
    """Gaussian vectors labelled by a fixed random linear teacher, with 10% of labels flipped."""
    generator = torch.Generator().manual_seed(DATA_SEED)
    inputs = torch.randn(samples, in_features, generator=generator)
    teacher = torch.randn(in_features, num_classes, generator=generator)
    labels = (inputs @ teacher).argmax(dim=1)
    flipped = torch.rand(samples, generator=generator) < 0.1
    labels[flipped] = torch.randint(num_classes, (int(flipped.sum()),), generator=generator)
    return {"features": inputs.numpy(), "label": labels.numpy()}


def markov_corpus(samples: int, seq_len: int, vocab_size: int) -> dict[str, np.ndarray]:
    """Token sequences from a random sparse Markov chain (best possible perplexity: 4)."""
    generator = torch.Generator().manual_seed(DATA_SEED)
    successors = torch.randint(vocab_size, (vocab_size, SUCCESSORS_PER_TOKEN), generator=generator)
    choices = torch.randint(SUCCESSORS_PER_TOKEN, (samples, seq_len), generator=generator)
    tokens = torch.empty(samples, seq_len, dtype=torch.long)
    tokens[:, 0] = torch.randint(vocab_size, (samples,), generator=generator)
    for position in range(1, seq_len):
        tokens[:, position] = successors[tokens[:, position - 1], choices[:, position]]
    return {"input_ids": tokens.numpy()}


def labelled_markov_corpus(samples: int, seq_len: int, vocab_size: int, num_classes: int) -> dict[str, np.ndarray]:
    """Token sequences each written by one of num_classes random sparse Markov chains, labelled by
    the chain: a sequence's transitions say which (sequence classification)."""
    generator = torch.Generator().manual_seed(DATA_SEED)
    successors = torch.randint(vocab_size, (num_classes, vocab_size, SUCCESSORS_PER_TOKEN), generator=generator)
    labels = torch.randint(num_classes, (samples,), generator=generator)
    choices = torch.randint(SUCCESSORS_PER_TOKEN, (samples, seq_len), generator=generator)
    tokens = torch.empty(samples, seq_len, dtype=torch.long)
    tokens[:, 0] = torch.randint(vocab_size, (samples,), generator=generator)
    for position in range(1, seq_len):
        tokens[:, position] = successors[labels, tokens[:, position - 1], choices[:, position]]
    return {"input_ids": tokens.numpy(), "label": labels.numpy()}
