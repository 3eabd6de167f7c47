"""The generated sets, built directly: the datasets' cache (data.sources) keeps a set once built on a
machine, so a run seldom builds one and only these tests hold what a fresh machine gets."""

from __future__ import annotations

import numpy as np
import pytest

from amp_suite.data import generated

SETS = {
    "class_patterns": (generated.class_patterns, {"samples": 64, "num_classes": 4, "size": 8}),
    "teacher_vectors": (generated.teacher_vectors, {"samples": 64, "in_features": 16, "num_classes": 4}),
    "markov_corpus": (generated.markov_corpus, {"samples": 16, "seq_len": 12, "vocab_size": 32}),
    "labelled_markov_corpus": (
        generated.labelled_markov_corpus, {"samples": 16, "seq_len": 12, "vocab_size": 32, "num_classes": 3},
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", SETS)
def test_a_generated_set_is_the_same_on_every_build_whatever_the_runs_seed(name):
    build, params = SETS[name]
    first, second = build(**params), build(**params)
    assert first.keys() == second.keys() and all(np.array_equal(first[k], second[k]) for k in first)
    assert all(len(column) == params["samples"] for column in first.values())


@pytest.mark.parametrize("name", ["class_patterns", "teacher_vectors", "labelled_markov_corpus"])
def test_every_class_is_labelled_and_only_those(name):
    build, params = SETS[name]
    labels = build(**params)["label"]
    assert labels.dtype == np.int64 and set(labels.tolist()) == set(range(params["num_classes"]))


def test_shapes_are_those_the_workloads_read():
    images = generated.class_patterns(8, 3, 12)["image"]
    assert images.shape == (8, 3, 12, 12) and images.dtype == np.float32
    assert generated.teacher_vectors(8, 5, 2)["features"].shape == (8, 5)
    tokens = generated.labelled_markov_corpus(8, 10, 20, 2)["input_ids"]
    assert tokens.shape == (8, 10) and 0 <= tokens.min() and tokens.max() < 20


def test_a_labelled_sequence_follows_its_own_chains_transitions():
    """Each token is one of SUCCESSORS_PER_TOKEN successors of the one before, in its label's chain:
    the structure a classifier learns (more distinct transitions than one chain would allow)."""
    data = generated.labelled_markov_corpus(64, 16, 32, 2)
    seen = {}
    for tokens, label in zip(data["input_ids"], data["label"], strict=True):
        for before, after in zip(tokens[:-1], tokens[1:], strict=True):
            seen.setdefault((int(label), int(before)), set()).add(int(after))
    assert max(len(successors) for successors in seen.values()) <= generated.SUCCESSORS_PER_TOKEN
