"""What the suite reads, bounded, through the CLI: YAML nested past any matrix, records whose
curves or values no cell can produce, text data too large, empty, binary or a folder, and
booleans where a number belongs. Each case failed before its fix (issue 39)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, read_records, runs_in, tiny_matrix
from support.refusals import assert_refused, run_measured

pytestmark = pytest.mark.slow

CPU = ("--device", "cpu")
DEEP = "name: " + "[" * 500 + "]" * 500 + "\n"  # 1 KB; PyYAML's composer recursed once per level


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A run folder of one fp32 cell, whose record the tests below copy and edit."""
    root = tmp_path_factory.mktemp("finished")
    (root / "m.yaml").write_text(yaml.safe_dump(tiny_matrix(name="readers", precisions=["fp32"])))
    done = amp_suite("run", "--matrix", "m.yaml", "--out", "out", *CPU, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "out"


def _folder_of(finished: Path, tmp_path: Path, records: list[dict]) -> Path:
    """A run folder holding the finished cell's record, then `records` (each a line)."""
    out = tmp_path / "edited"
    out.mkdir()
    shutil.copy(finished / "invocations.jsonl", out)
    good = (finished / "results.jsonl").read_text()
    (out / "results.jsonl").write_text(good + "".join(json.dumps(r) + "\n" for r in records))
    return out


def _variant(record: dict, seed: int, **fields) -> dict:
    """The record as another seed's cell, with `fields` changed: its own identity, no conflict."""
    cell_id = record["cell_id"].replace("/seed0/", f"/seed{seed}/")
    return {**record, "record_id": f"edited-{seed}", "seed": seed, "cell_id": cell_id, **fields}


# -- item 7: YAML nested deeper than any matrix ------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--matrix", "deep.yaml", "--out", "out", *CPU],
        ["inspect", "--matrix", "deep.yaml", "--workload", "mlp", "--precision", "fp32", *CPU],
        ["report", "empty.jsonl", "--references", "deep.yaml"],
    ],
    ids=["run", "inspect", "report"],
)
def test_yaml_nested_500_deep_is_one_line_not_a_recursion_traceback(tmp_path, command):
    (tmp_path / "deep.yaml").write_text(DEEP)
    (tmp_path / "empty.jsonl").touch()
    result = run_measured(*command, cwd=tmp_path)
    assert_refused(result, "deep.yaml: nests deeper than 24 levels at line 1")  # inspect too: before torch loads
    assert not (tmp_path / "out").exists() and not (tmp_path / "report").exists()


def test_aliases_that_nest_deeper_than_any_matrix_are_refused(tmp_path):
    """Each alias puts the last list inside one more: shallow as written, 40 deep once expanded."""
    chain = "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 40))
    (tmp_path / "m.yaml").write_text("a0: &a0 [x]\n" + chain)
    result = run_measured("run", "--matrix", "m.yaml", "--out", "out", *CPU, cwd=tmp_path)
    assert_refused(result, "m.yaml: nests deeper than 24 levels once its aliases are expanded")


# -- item 15: a boolean is not a count --------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"steps": True}, "steps: Input should be a valid integer (got True)"),
        ({"repeats": False}, "repeats: Input should be a valid integer (got False)"),
        ({"max_grad_norm": True}, "max_grad_norm: Input should be a valid number (got True)"),
        ({"parity": {"tolerance": True}}, "parity.tolerance: Input should be a valid number (got True)"),
    ],
    ids=["steps", "repeats", "max_grad_norm", "parity.tolerance"],
)
def test_a_boolean_is_refused_wherever_a_number_goes(tmp_path, override, expected):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(tiny_matrix(**override)))
    result = run_measured("run", "--matrix", "m.yaml", "--out", "out", *CPU, cwd=tmp_path)
    assert_refused(result, expected)
    assert not (tmp_path / "out").exists()


def test_a_boolean_workload_size_is_refused_too(tmp_path):
    matrix = tiny_matrix()
    matrix["workloads"][0] |= {"samples": True, "hidden": True}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(matrix))
    result = run_measured("run", "--matrix", "m.yaml", "--out", "out", *CPU, cwd=tmp_path)
    assert result["code"] == 2 and result["stderr"].splitlines() == [
        "amp-suite: error: matrix m.yaml: 2 problems:",
        "  workloads.0.samples: Input should be a valid integer (got True)",
        "  workloads.0.hidden: Input should be a valid integer (got True)",
    ], result["stderr"]


# -- item 16: ok records whose values no cell measures -----------------------------------------


def test_ok_records_with_values_no_cell_measures_are_skipped_and_counted(finished, tmp_path):
    record = json.loads((finished / "results.jsonl").read_text())
    nonsense = [
        _variant(record, 1, val_metric="Infinity"),
        _variant(record, 2, peak_memory_mb=-512.0),
        _variant(record, 3, batch_size=10**30),
        _variant(record, 4, step_time_ms_p50=-1.0),
    ]
    out = _folder_of(finished, tmp_path, nonsense)
    done = amp_suite("summary", str(out), cwd=tmp_path, env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 unreadable line(s) skipped" in done.stderr, done.stderr
    assert "1 records" in done.stdout and "acc inf" not in done.stdout and "-512" not in done.stdout, done.stdout
    header = next(line for line in done.stdout.splitlines() if "precision" in line)
    assert all(column in header for column in ("batch", "throughput", "peak MB")), header  # none dropped


# -- item 10: records large but bounded, read in bounded memory --------------------------------


def test_large_records_are_read_in_bounded_memory(finished, tmp_path):
    """Eight records of 1,000,000 steps (the most a matrix allows) with their full loss curves,
    and one line whose 5,000,000-point curve no record can hold: summary reads them in a few hundred
    MB (before: 956 MB; eight 5M-point lines alone took 2.1 GB)."""
    record = json.loads((finished / "results.jsonl").read_text())
    out = _folder_of(finished, tmp_path, [])
    curve = json.dumps([round(2.3 - 1e-6 * step, 6) for step in range(1_000_000)])  # written once, in each line
    with (out / "results.jsonl").open("a") as results:
        for seed in range(1, 9):
            head = json.dumps(_variant(record, seed, steps=1_000_000, loss_curve=[]))
            results.write(head.replace('"loss_curve": []', f'"loss_curve": {curve}') + "\n")
        results.write(json.dumps(_variant(record, 9, loss_curve=[0.5] * 5_000_000)) + "\n")
    result = run_measured("summary", str(out), cwd=tmp_path)
    assert result["code"] == 0, result
    assert "9 records" in result["stdout"] and "1 unreadable line(s) skipped" in result["stderr"], result
    assert result["peak_mb"] < 400, result["peak_mb"]  # before: 956 MB


def test_sync_charts_a_million_step_curve_in_seconds_and_keeps_every_point_in_the_record(finished, tmp_path):
    """A store takes ~10,000 metric rows a second: two 1,000,000-step records took minutes to sync
    (killed at 90 s). The curve's history is a strided sample; record.json keeps every point."""
    record = json.loads((finished / "results.jsonl").read_text())
    out = tmp_path / "long"
    out.mkdir()
    curve = [round(2.3 - 1e-6 * step, 6) for step in range(1_000_000)]
    lines = [_variant(record, seed, steps=1_000_000, loss_curve=curve) for seed in (1, 2)]
    (out / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = f"sqlite:///{tmp_path / 'team.db'}"
    started = time.monotonic()
    done = amp_suite("sync", str(out), "--tracking-uri", store, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 60
    from mlflow import MlflowClient

    client = MlflowClient(store)
    run = next(r for r in runs_in(store, record["matrix"])[1] if r.data.tags.get("cell_id") == lines[0]["cell_id"])
    history = client.get_metric_history(run.info.run_id, "train_loss")
    warmup = record["warmup_steps"]
    assert len(history) <= 10_001 and history[-1].step == warmup + 999_999 and history[-1].value == curve[-1]
    kept = json.loads(Path(client.download_artifacts(run.info.run_id, "record.json", str(tmp_path))).read_text())
    assert kept["loss_curve"] == curve


# -- items 11 and 14: text data, bounded and explained -----------------------------------------


def _text_workload(label: str, path: Path) -> dict:
    data = {"source": "text", "path": str(path), "val_samples": 4}
    return {"workload": "transformer", "label": label, "n_layer": 1, "n_embd": 16, "n_head": 2, "seq_len": 16,
            "vocab_size": 256, "batch_sizes": [4], "samples": 8, "data": data}  # fmt: skip


@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    """One run over text sources of every kind: a good one, then four it can't use."""
    root = tmp_path_factory.mktemp("text")
    good = root / "good.txt"
    good.write_text("".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400)))
    (root / "empty.txt").touch()
    (root / "binary.txt").write_bytes(bytes(range(256)) * 64)
    (root / "folder").mkdir()
    endless = root / "one-line.txt"  # 2 GB without a newline, sparse: it costs no disk
    subprocess.run(["truncate", "-s", "2G", str(endless)], check=True)
    matrix = tiny_matrix(name="text", precisions=["fp32"], steps=2, warmup_steps=1)
    names = {"good": good, "empty": root / "empty.txt", "binary": root / "binary.txt", "folder": root / "folder",
             "oneline": endless}  # fmt: skip
    matrix["workloads"] = [_text_workload(label, path) for label, path in names.items()]
    (root / "m.yaml").write_text(yaml.safe_dump(matrix))
    cache = root / "hf-cache"  # where the datasets library would cache what it loads
    env = {"HF_HOME": str(cache), "HF_DATASETS_CACHE": str(cache / "datasets")}
    done = amp_suite("run", "--matrix", "m.yaml", "--out", "out", *CPU, cwd=root, env=env, timeout=120)
    return root, done, {r["workload"]: r for r in read_records(root / "out")}  # a workload is named by its label


def test_usable_text_trains_and_nothing_is_cached_outside_out(text_run):
    root, done, records = text_run
    assert done.returncode == 3, done.stdout + done.stderr  # the four unusable sources fail their cells
    assert records["good"]["status"] == "ok", records["good"]["reason"]
    assert records["good"]["data_source"].startswith("text:"), records["good"]
    assert not (root / "hf-cache").exists(), sorted(str(p) for p in (root / "hf-cache").rglob("*"))[:5]


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        ("empty", "empty.txt': holds no text"),
        ("binary", "binary.txt': not text (a NUL byte in line 1)"),
        ("folder", "folder': is a folder, not a regular file (data.source text reads one text file)"),
        ("oneline", "one-line.txt': line 1 is longer than 1 MiB (text is split into training and validation"),
    ],
)
def test_unusable_text_fails_its_cell_with_a_reason_that_names_it(text_run, label, reason):
    _, done, records = text_run
    record = records[label]
    assert record["status"] == "failed" and reason in record["reason"], record["reason"]
    assert "DatasetGenerationError" not in record["reason"] and "Unable to find" not in record["reason"]
    assert record["duration_s"] < 30, record["duration_s"]  # the 2 GB line is not read through
