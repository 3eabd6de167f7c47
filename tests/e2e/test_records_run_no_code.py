"""`amp-suite predict --results` on a run folder someone sent: a record names data, never code to
run. A cell of the user's own model is profiled only when the user names its entry with --model;
otherwise it is left out, and said why. Profiling builds one sample of a cell's data, never its
whole set; a Hugging Face model profiles from its local config folder, offline (issue 52).

The records are the H200's (tests/fixtures, gpu-check's fp32 and bf16 cells of 2026-12-04), each
with its workload block replaced: what is checked is what predict runs, not the estimate."""

from __future__ import annotations

import json

from conftest import REPO, amp_suite, predict_rows
from support.refusals import run_measured

H200_RECORDS = REPO / "tests" / "fixtures" / "h200-gpu-check-2026-12-04.jsonl"
TINY_MLP = {"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": [16], "samples": 64}
MODEL_FILE = """
import pathlib

import torch

from amp_suite import UserWorkload

pathlib.Path(__file__).with_name("model-imported").touch()  # evidence that this file ran


def build(width: int = 16) -> UserWorkload:
    model = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))
    inputs, targets = torch.randn(64, 8), torch.randint(0, 4, (64,))
    return UserWorkload(model, train=(inputs[:48], targets[:48]), validation=(inputs[48:], targets[48:]))
"""


def run_folder(tmp_path, workload: dict, label: str, name: str = "sent") -> str:
    """A run folder of the H200's fp32 and bf16 records of one cell, its workload block `workload`
    (named `label`, as a record names its workload)."""
    run = tmp_path / name
    run.mkdir()
    lines = []
    for record in map(json.loads, H200_RECORDS.read_text().splitlines()):
        if record["precision"] in ("fp32", "bf16"):
            record["config"]["workload"] = {**workload, "batch_sizes": [record["batch_size"]]}
            record["workload"] = label
            lines.append(json.dumps(record))
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    return str(run)


def estimated_modes(stdout: str) -> set[str]:
    """The modes in predict's table of estimated against measured."""
    return {row[2] for row in predict_rows(stdout)}


def test_a_record_naming_os_system_is_left_out_with_its_reason_and_nothing_runs(tmp_path):
    """Before: predict imported `os` and called system() with the record's args, in its own
    process (the marker appeared), then printed a traceback."""
    marker = tmp_path / "marker"
    command = {"workload": "custom", "entry": "os:system", "args": {"command": f"touch {marker}"}}
    run = run_folder(tmp_path, command, "os")
    done = amp_suite("predict", "--results", run, cwd=tmp_path, env={"COLUMNS": "250"})
    assert not marker.exists()
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    said = " ".join(done.stdout.split())
    assert "not estimated: os (gpu-check): its records name code to run (entry os:system)" in said, said
    assert "--model os:system" in said, said  # how to ask for it
    assert "no single-GPU cell finished ok on CUDA that a roofline can estimate" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    # Naming another entry does not run this one either.
    (tmp_path / "model.py").write_text(MODEL_FILE)
    other = amp_suite("predict", "--results", run, "--model", "model.py:build", cwd=tmp_path)
    assert other.returncode == 2 and not marker.exists(), other.stdout + other.stderr
    assert not (tmp_path / "model-imported").exists()


def test_a_users_cell_is_profiled_when_the_user_names_its_entry(tmp_path):
    """The records name the file where it was on the machine that ran (a folder this one lacks);
    the user names their copy here: its file and function match, and the copy named is what runs."""
    (tmp_path / "model.py").write_text(MODEL_FILE)
    elsewhere = {"workload": "custom", "entry": "/home/someone/project/model.py:build", "args": {"width": 16}}
    run = run_folder(tmp_path, elsewhere, "model")
    unnamed = amp_suite("predict", "--results", run, cwd=tmp_path, env={"COLUMNS": "250"})
    assert unnamed.returncode == 2 and not (tmp_path / "model-imported").exists(), unnamed.stdout + unnamed.stderr
    assert "--model /home/someone/project/model.py:build" in " ".join(unnamed.stdout.split()), unnamed.stdout

    named = amp_suite("predict", "--results", run, "--model", "model.py:build", cwd=tmp_path, env={"COLUMNS": "250"})
    assert named.returncode == 0, named.stdout + named.stderr
    assert (tmp_path / "model-imported").exists()
    assert "profiling gpu-check: model at batch 16 in fp32" in named.stdout, named.stdout
    assert estimated_modes(named.stdout) == {"fp32", "bf16"}, named.stdout
    assert "not estimated" not in named.stdout, named.stdout


def test_predict_refuses_a_model_option_that_names_no_entry_or_comes_without_results(tmp_path):
    bad = amp_suite("predict", "--results", "somewhere", "--model", "not an entry", cwd=tmp_path)
    assert bad.returncode == 2 and "module:function or file.py:function" in bad.stderr, bad.stderr
    alone = amp_suite("predict", "--model", "model.py:build", cwd=tmp_path)
    assert alone.returncode == 2 and "--model names the entry of --results' own cells" in alone.stderr, alone.stderr


def test_profiling_a_cell_of_a_large_data_set_builds_one_sample_not_the_set(tmp_path):
    """The MLP's generated set at 150,000 samples of 1,024 features is 600 MB of float32 (and as
    much again in the datasets cache it was written to). Before: predict built all of it to profile
    one batch, peaking at 4.3 GB (1.0 GB for the 64-sample set); now one sample, and a step of fake
    tensors: 0.9 GB (2026-12-07, this CPU)."""
    small = run_measured("predict", "--results", run_folder(tmp_path, TINY_MLP, "mlp", "small"), cwd=tmp_path,
                         env={"XDG_CACHE_HOME": str(tmp_path / "cache")})  # fmt: skip
    assert small["code"] == 0, small
    large = {**TINY_MLP, "in_features": 1024, "samples": 150_000, "data": {"source": "synthetic", "val_samples": 512}}
    done = run_measured("predict", "--results", run_folder(tmp_path, large, "mlp", "large"), cwd=tmp_path,
                        env={"XDG_CACHE_HOME": str(tmp_path / "cache")})  # fmt: skip
    assert done["code"] == 0, done
    assert estimated_modes(done["stdout"]) == {"fp32", "bf16"}, done["stdout"]
    print(f"peak RSS: {small['peak_mb']:.0f} MB for the small set, {done['peak_mb']:.0f} MB for the large one")
    assert done["peak_mb"] < small["peak_mb"] + 100, (small["peak_mb"], done["peak_mb"])
    cached = sum(path.stat().st_size for path in (tmp_path / "cache").rglob("*") if path.is_file())
    assert cached < 10 << 20, cached  # no 600 MB copy of the set on disk either


def test_predict_profiles_a_hugging_face_model_from_its_local_folder_offline(tmp_path):
    """Before: every `workload: hf` cell failed with "Couldn't swap Embedding.weight" (the model's
    `.to(torch.float32)` on fake tensors)."""
    folder = tmp_path / "models" / "tiny-llama"
    folder.mkdir(parents=True)
    llama = {"model_type": "llama", "vocab_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
             "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "max_position_embeddings": 64}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(llama))  # as LlamaConfig.save_pretrained writes it, in short
    hf = {"workload": "hf", "model": str(folder), "seq_len": 32, "samples": 128,
          "data": {"source": "synthetic", "val_samples": 32}}  # fmt: skip
    env = {"COLUMNS": "250", "HF_HUB_OFFLINE": "1"}
    done = amp_suite("predict", "--results", run_folder(tmp_path, hf, "tiny-llama"), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "profiling gpu-check: tiny-llama at batch 16 in fp32" in done.stdout, done.stdout
    assert estimated_modes(done.stdout) == {"fp32", "bf16"}, done.stdout


def test_a_model_too_large_to_profile_here_is_left_out_before_anything_is_allocated(tmp_path):
    """A Llama config of ~2.3e9 parameters (within the suite's 4e9): its optimizer's step, which
    the profile runs on real tensors, would hold ~37 GB. Before: predict allocated them, to the host's
    OOM killer (under a 14 GiB address-space limit: "can't allocate memory"); now one line, at once."""
    folder = tmp_path / "models" / "llama-2b"
    folder.mkdir(parents=True)
    llama = {"model_type": "llama", "vocab_size": 32000, "num_attention_heads": 32, "num_key_value_heads": 32,
             "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 10,
             "max_position_embeddings": 4096}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(llama))
    hf = {"workload": "hf", "model": str(folder), "seq_len": 32, "samples": 128,
          "data": {"source": "synthetic", "val_samples": 32}}  # fmt: skip
    done = run_measured("predict", "--results", run_folder(tmp_path, hf, "llama-2b"), cwd=tmp_path)
    assert done["code"] == 2 and "Traceback" not in done["stderr"], done
    said = " ".join(done["stdout"].split())
    assert "not estimated: llama-2b (gpu-check): profiling it failed: ProfileTooLarge: profiling its step" in said
    assert done["peak_mb"] < 2000, done["peak_mb"]
