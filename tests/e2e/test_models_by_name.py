"""Architectures by name, without code, through `amp-suite run`, offline: a torchvision model the
suite does not ship (mobilenet_v3_small), a timm model, and Hugging Face models for each task
from config folders saved to disk. A name the library does not list, a folder that isn't there, a
task the architecture has no model for, a sequence longer than its positions: one line, exit 2,
before anything is written."""

from __future__ import annotations

import pytest
import transformers
import yaml
from conftest import amp_suite, assert_one_step_figure, read_records

from amp_suite.cli.preflight import check_workloads
from amp_suite.config import ConfigError, load_matrix

SMALL = {"batch_sizes": [16], "samples": 128, "force": ["bf16"]}
TOKENS = {**SMALL, "seq_len": 32, "data": {"source": "synthetic", "val_samples": 32}}
IMAGES = {**SMALL, "image_size": 32, "num_classes": 10, "data": {"source": "digits", "val_samples": 32}}


def matrix_file(tmp_path, workloads: list[dict], precisions=("fp32", "bf16")):
    # Four timed steps, as conftest.tiny_matrix: what is checked is that each model runs to an
    # answer, not what the answer is (a mobilenet or ViT step here is a few hundred ms).
    matrix = {"name": "by-name", "seed": 0, "warmup_steps": 2, "steps": 4, "precisions": list(precisions),
              "workloads": workloads}  # fmt: skip
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


def save_tiny_configs(folder) -> None:
    """Two-layer Llama, BERT and T5 configs, as a user's folders would hold them (no weights)."""
    shape = {"vocab_size": 256, "num_attention_heads": 4}
    layers = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "max_position_embeddings": 64}
    transformers.LlamaConfig(**shape, **layers, num_key_value_heads=2).save_pretrained(folder / "tiny-llama")
    transformers.BertConfig(**shape, **layers).save_pretrained(folder / "tiny-bert")
    transformers.T5Config(vocab_size=256, num_heads=4, d_model=32, d_kv=8, d_ff=64,
                          num_layers=2).save_pretrained(folder / "tiny-t5")  # fmt: skip


def run_matrix(tmp_path, workloads, **kwargs):
    out = tmp_path / "out"
    path = matrix_file(tmp_path, workloads, **kwargs)
    done = amp_suite("run", "--matrix", str(path), "--out", str(out), "--device", "cpu", cwd=tmp_path)
    return done, out


@pytest.mark.slow
def test_models_named_from_torchvision_timm_and_transformers_run_to_an_answer_offline(tmp_path):
    (tmp_path / "models").mkdir()
    save_tiny_configs(tmp_path / "models")
    workloads = [
        {"workload": "torchvision", "model": "mobilenet_v3_small", **IMAGES},
        {"workload": "timm", "model": "vit_tiny_patch16_224", **IMAGES},
        {"workload": "hf", "model": "models/tiny-llama", **TOKENS},  # beside the matrix, as a user's folder
        {"workload": "hf", "model": "models/tiny-llama", "task": "seq-cls", "label": "llama-cls", **TOKENS},
        {"workload": "hf", "model": "models/tiny-bert", "task": "masked-lm", **TOKENS},
        {"workload": "hf", "model": "models/tiny-t5", "task": "seq2seq", "target_len": 8, **TOKENS},
    ]
    done, out = run_matrix(tmp_path, workloads)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_one_step_figure(read_records(out))
    records = {(r["workload"], r["precision"]): r for r in read_records(out)}
    metrics = {"mobilenet_v3_small": "val_accuracy", "vit_tiny_patch16_224": "val_accuracy",
               "tiny-llama": "val_perplexity", "llama-cls": "val_accuracy", "tiny-bert": "val_mlm_accuracy",
               "tiny-t5": "val_token_accuracy"}  # fmt: skip
    assert {name for name, _ in records} == set(metrics)  # each called by its model's name (or its label)
    for (name, precision), record in records.items():
        assert record["status"] == "ok", (name, precision, record.get("error"))
        assert record["val_metric_name"] == metrics[name]
        assert record["flops_per_step"] > 0
    assert records[("tiny-llama", "fp32")]["config"]["workload"]["model"] == str(tmp_path / "models" / "tiny-llama")
    for unit in ("images/s", "tokens/s", "sequences/s", "samples/s"):
        assert unit in done.stdout
    answers = done.stdout.split("The answer", 1)[1]
    for name in metrics:
        assert f"{name} (batch 16, eager): " in answers


@pytest.mark.parametrize(
    ("library", "name", "line"),
    [
        ("torchvision", "mobilenet_v3_smal", "no model 'mobilenet_v3_smal': did you mean mobilenet_v3_small"),
        ("timm", "vit_tiny_patch16_22", "no model 'vit_tiny_patch16_22': did you mean vit_tiny_patch16_224"),
    ],
)  # fmt: skip
def test_a_name_the_library_does_not_list_is_one_line_with_the_close_ones(tmp_path, library, name, line):
    done, out = run_matrix(tmp_path, [{"workload": library, "model": name, "batch_sizes": [16]}])
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{library} has {line}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (out / "results.jsonl").exists()


@pytest.mark.parametrize(
    ("workload", "line"),
    [
        ({"model": "./no-such-folder"}, "no folder"),
        ({"model": "models/tiny-llama", "task": "seq2seq"}, "tiny-llama: llama has no seq2seq model"),
        ({"model": "models/tiny-bert", "seq_len": 128}, "tiny-bert: seq_len 128 is more than the model's 64 positions"),
        ({"model": "models/tiny-bert", "vocab_size": 1000}, "tiny-bert: vocab_size 1000 is more than the model's 256"),
        ({"model": "models/tiny-llama", "pretrained": True}, "pretrained: true, but"),  # a config, no weights
        ({"model": "models"}, "holds no config.json"),
    ],
)  # fmt: skip
def test_a_hugging_face_model_that_cannot_run_is_one_line_before_any_cell(tmp_path, workload, line):
    """What `amp-suite run` checks before any cell (reading the matrix, then cli.preflight), in this
    process: each CLI run would import transformers again. The next test runs one through the CLI."""
    (tmp_path / "models").mkdir()
    save_tiny_configs(tmp_path / "models")
    with pytest.raises(ConfigError) as refused:
        check_workloads(load_matrix(matrix_file(tmp_path, [{"workload": "hf", **TOKENS, **workload}])))
    assert line in str(refused.value) and "\n" not in str(refused.value)


def test_a_hugging_face_model_refused_ends_the_run_at_its_line_before_anything_is_written(tmp_path):
    (tmp_path / "models").mkdir()
    save_tiny_configs(tmp_path / "models")
    done, out = run_matrix(tmp_path, [{"workload": "hf", **TOKENS, "model": "models/tiny-llama", "task": "seq2seq"}])
    assert done.returncode == 2, done.stdout + done.stderr
    assert "tiny-llama: llama has no seq2seq model" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (out / "results.jsonl").exists()


def test_pretrained_weights_load_from_the_folder_in_float32_whatever_the_checkpoint_holds(tmp_path):
    """`pretrained: true` trains the folder's weights, not random ones, and in float32 even from a
    bf16 checkpoint: autocast, not the checkpoint, decides each op's precision."""
    import torch

    from amp_suite.config.workloads import HfConfig
    from amp_suite.workloads import build_workload

    save_tiny_configs(tmp_path)
    config = transformers.AutoConfig.from_pretrained(tmp_path / "tiny-llama")
    saved = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    saved.save_pretrained(tmp_path / "llama-weights")

    def built(pretrained: bool):
        workload = {"workload": "hf", **TOKENS, "model": "llama-weights", "pretrained": pretrained}
        return build_workload(HfConfig.model_validate(workload, context={"matrix_dir": tmp_path})).build_model(None)

    loaded = built(pretrained=True)
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    weights = dict(saved.named_parameters())
    assert all(torch.equal(p, weights[name].float()) for name, p in loaded.named_parameters())
    fresh = built(pretrained=False)  # random weights from the config the folder holds
    assert {p.dtype for p in fresh.parameters()} == {torch.float32}
    assert not torch.equal(fresh.model.embed_tokens.weight, loaded.model.embed_tokens.weight)


def test_a_changed_model_folder_is_a_new_configuration_for_resume(tmp_path):
    """The config hash (what --resume compares) holds a digest of the folder: an edited config.json
    or new weights make a new configuration; the same folder read again, the same one."""
    from amp_suite.config.loading import load_matrix

    save_tiny_configs(tmp_path)
    path = matrix_file(tmp_path, [{"workload": "hf", "model": "tiny-llama", **TOKENS}], precisions=["fp32"])

    def config_hash() -> str:
        (cell,) = load_matrix(path).cells("cpu")
        return cell.config_hash

    first = config_hash()
    assert config_hash() == first
    config = tmp_path / "tiny-llama" / "config.json"
    config.write_text(config.read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3'))
    edited = config_hash()
    assert edited != first
    (tmp_path / "tiny-llama" / "model.safetensors").write_bytes(b"weights")
    assert config_hash() != edited
