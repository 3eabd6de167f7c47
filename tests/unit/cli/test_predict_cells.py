"""Which recorded cells `amp-suite predict` may profile, and what it builds of them: a workload
that names an entry only with the entry the user names; every workload at one sample, from a
source of its own, without weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from amp_suite.cli.predict_cells import entry_option
from amp_suite.config.workloads import CustomConfig, HfConfig, ResNetConfig, TransformerConfig
from amp_suite.report.cell_profiles import one_sample, with_named_entry

CUSTOM = {"workload": "custom", "batch_sizes": [8]}


def test_an_entry_is_profiled_only_as_the_user_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recorded = CustomConfig.model_validate({**CUSTOM, "entry": "/elsewhere/models/cnn.py:build"})
    workload, why = with_named_entry(recorded, [])
    assert workload is None and "entry /elsewhere/models/cnn.py:build" in why and "--model" in why
    named = entry_option("cnn.py:build")  # the user's copy, from the working directory
    assert named == f"{tmp_path / 'cnn.py'}:build"
    workload, why = with_named_entry(recorded, [named])
    assert why is None and workload.entry == named  # the copy named is what runs
    assert with_named_entry(recorded, [entry_option("cnn.py:make")])[0] is None  # another function
    assert with_named_entry(recorded, [entry_option("other.py:build")])[0] is None
    system = CustomConfig.model_validate({**CUSTOM, "entry": "os:system"})
    assert with_named_entry(system, [named])[0] is None
    assert with_named_entry(system, [entry_option("os:system")])[0].entry == "os:system"


def test_a_workload_that_names_no_entry_is_profiled_as_recorded():
    mlp = TransformerConfig.model_validate({"workload": "transformer", "batch_sizes": [8]})
    assert with_named_entry(mlp, []) == (mlp, None)


@pytest.mark.parametrize("value", ["not an entry", "os", ":build", "x" * 5000 + ":f"])
def test_an_option_that_names_no_entry_is_refused_in_bounded_words(value):
    with pytest.raises(typer.BadParameter) as refused:
        entry_option(value)
    assert len(str(refused.value)) < 200


def test_a_profile_reads_one_sample_from_a_source_of_the_workloads_own_and_no_weights(tmp_path):
    text = TransformerConfig.model_validate(
        {"workload": "transformer", "batch_sizes": [8], "samples": 100_000, "vocab_size": 512,
         "data": {"source": "text", "path": str(tmp_path / "corpus.txt")}}
    )  # fmt: skip
    small = one_sample(text)
    assert (small.samples, small.data.val_samples, small.data.source, small.data.path) == (1, 1, "synthetic", None)
    assert small.seq_len == text.seq_len and small.vocab_size == 512  # the shapes stay the record's
    digits = one_sample(
        ResNetConfig.model_validate({"workload": "resnet", "batch_sizes": [8], "data": {"source": "digits"}})
    )
    assert digits.data.source == "digits"  # bundled: read as recorded
    folder = tmp_path / "llama"
    folder.mkdir()
    hf = HfConfig.model_validate({"workload": "hf", "model": str(folder), "pretrained": True, "batch_sizes": [8]})
    assert one_sample(hf).pretrained is False and Path(one_sample(hf).model) == folder
