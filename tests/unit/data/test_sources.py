"""Offline data: bundled and generated sets, local folders, the fixed split, the hub's error."""

from __future__ import annotations

import math
import socket

import numpy as np
import pytest
import torch

from amp_suite.config import DataConfig
from amp_suite.data.convert import image_tensors, token_tensors, vector_tensors
from amp_suite.data.generated import markov_corpus
from amp_suite.data.sources import DataUnavailableError, GeneratedSet, load_splits


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_digits_load_offline_with_a_fixed_split(tmp_path, no_network):
    splits = load_splits(DataConfig(source="digits"), cache_dir=tmp_path)
    assert len(splits.train) + len(splits.validation) == 1797
    assert len(splits.validation) == math.ceil(1797 * 0.2)
    again = load_splits(DataConfig(source="digits"), cache_dir=tmp_path)
    assert again.fingerprint == splits.fingerprint
    assert again.train["label"] == splits.train["label"]  # the split never depends on a run seed
    train = image_tensors(splits.train, image_size=32, limit=100)
    assert train.inputs.shape == (100, 3, 32, 32) and 0.0 <= train.inputs.min() and train.inputs.max() <= 1.0
    assert vector_tensors(splits.train, limit=10).inputs.shape == (10, 64)


def test_generated_sets_are_built_once_and_cached(tmp_path, no_network):
    calls = []

    def corpus(**params):
        calls.append(params)
        return markov_corpus(**params)

    generated = GeneratedSet(corpus, {"samples": 40, "seq_len": 16, "vocab_size": 64}, val_samples=8)
    first = load_splits(DataConfig(source="synthetic"), generated, cache_dir=tmp_path)
    second = load_splits(DataConfig(source="synthetic"), generated, cache_dir=tmp_path)
    assert len(calls) == 1 and first.fingerprint == second.fingerprint
    assert (len(first.train), len(first.validation)) == (32, 8)
    tokens = token_tensors(first.train, seq_len=16, limit=100)
    assert tokens.inputs.shape == (32, 16) and int(tokens.inputs.max()) < 64
    other = GeneratedSet(corpus, {"samples": 40, "seq_len": 16, "vocab_size": 32}, val_samples=8)
    assert load_splits(DataConfig(source="synthetic"), other, cache_dir=tmp_path).fingerprint != first.fingerprint


def test_local_image_folder_offline(tmp_path, no_network):
    from PIL import Image

    for label in ("cat", "dog"):
        folder = tmp_path / "images" / label
        folder.mkdir(parents=True)
        for index in range(5):
            pixels = np.full((12, 10, 3), 40 * index, dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{index}.png")
    config = DataConfig(source="imagefolder", path=str(tmp_path / "images"), val_fraction=0.2)
    splits = load_splits(config, cache_dir=tmp_path / "cache")
    assert (len(splits.train), len(splits.validation)) == (8, 2)
    train = image_tensors(splits.train, image_size=16, limit=100)
    assert train.inputs.shape == (8, 3, 16, 16) and set(train.targets.tolist()) <= {0, 1}


def test_local_text_becomes_byte_tokens(tmp_path, no_network):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"line {i}: the quick brown fox" for i in range(50)))
    sizes = GeneratedSet(markov_corpus, {"samples": 40, "seq_len": 32, "vocab_size": 256}, val_samples=8)
    splits = load_splits(DataConfig(source="text", path=str(corpus)), sizes, cache_dir=tmp_path / "cache")
    tokens = token_tensors(splits.train, seq_len=32, limit=1000)
    assert tokens.inputs.shape[1] == 32 and int(tokens.inputs.max()) < 256
    assert bytes(tokens.inputs[0].tolist()).decode().startswith("line ")


def test_a_missing_hub_dataset_says_how_to_provide_it(tmp_path, no_network):
    config = DataConfig(source="hub", name="amp-suite/no-such-dataset")
    with pytest.raises(DataUnavailableError) as raised:
        load_splits(config, cache_dir=tmp_path)
    message = str(raised.value)
    assert "'amp-suite/no-such-dataset' is not available here" in message
    assert "datasets.load_dataset" in message and "data.path" in message


def test_a_missing_local_path_is_a_clear_error(tmp_path):
    with pytest.raises(DataUnavailableError, match="does not exist"):
        load_splits(DataConfig(source="imagefolder", path=str(tmp_path / "absent")), cache_dir=tmp_path)


def test_generated_data_is_learnable_structure():
    tokens = torch.as_tensor(markov_corpus(samples=64, seq_len=32, vocab_size=128)["input_ids"])
    pairs = {(a, b) for row in tokens.tolist() for a, b in zip(row, row[1:], strict=False)}
    successors = {}
    for a, b in pairs:
        successors.setdefault(a, set()).add(b)
    assert max(len(s) for s in successors.values()) <= 4  # far from uniform over 128 tokens
