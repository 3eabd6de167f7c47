"""Bad input of every kind, through the CLI: exit 2, one line, no traceback, within seconds,
without large memory use, and nothing written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import cli_env, free_port, tiny_matrix
from support.refusals import assert_refused, run_measured

pytestmark = pytest.mark.slow

def _write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


VALID = yaml.safe_dump(tiny_matrix())
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)

MATRIX_FILES = {
    "negative steps": (VALID.replace("steps: 4", "steps: -3"), "steps: Input should be greater than or equal to 1"),
    "unknown workload": (VALID.replace("workload: mlp", "workload: vit"), "workloads.0.workload"),
    "malformed YAML": ("name: [unclosed\n", "malformed YAML"),
    "binary file": (bytes(range(256)) * 64, "not UTF-8 text"),
    "oversized file": ("# padding\n" * 200_000, "larger than 1 MiB"),
    "alias bomb": (LAUGHS, "expands to more than 100,000 YAML nodes"),
    "recursive alias": ("name: &n [*n]\n", "a YAML alias refers to itself"),
    "infinite number": (VALID.replace("steps: 4", "steps: 4\nmax_grad_norm: .inf"), "finite number"),
    "steps that would never end": (VALID.replace("steps: 4", "steps: 1000000000000"), "less than or equal to"),
    "name unfit for a file name": (VALID.replace("name: tiny", "name: ../../etc"), "name: String should match"),
    "value echoed huge": (VALID.replace("steps: 4", "steps: '" + "9" * 100_000 + "'"), "..."),
    "a key given twice": (VALID + "steps: 5\n", "key 'steps' appears twice"),
}


@pytest.mark.parametrize("case", MATRIX_FILES, ids=list(MATRIX_FILES))
def test_bad_matrix_files(tmp_path, case):
    content, expected = MATRIX_FILES[case]
    matrix = _write(tmp_path / "m.yaml", content)
    result = run_measured("run", "--matrix", str(matrix), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert_refused(result, expected)
    assert len(result["stderr"]) < 600
    assert not (tmp_path / "out").exists()


def test_an_endless_matrix_file(tmp_path):
    result = run_measured("run", "--matrix", "/dev/zero", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert_refused(result, "matrix /dev/zero: is a character device, not a regular file")
    os.mkfifo(tmp_path / "fifo.yaml")  # nothing ever writes it: reading would wait forever
    result = run_measured("run", "--matrix", str(tmp_path / "fifo.yaml"), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert_refused(result, "fifo.yaml: is a FIFO, not a regular file")


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--matrix", "missing.yaml"], "no such file"),
        (["--matrix", "."], "is a folder, not a regular file"),
        (["--out", "a-file"], "--out a-file: exists and is not a folder"),
        (["--out", "a-file/below"], "a-file is not a folder"),
        (["--tracking-uri", "ftp://host/x"], "unsupported scheme 'ftp'"),
        (["--tracking-uri", "file:///tmp/mlruns"], "file store is deprecated"),
        (["--tracking-uri", "sqlite:////no/such/dir/mlflow.db"], "/no/such/dir does not exist"),
        (["--workloads", ","], "--workloads: empty"),
        (["--precisions", "fp32,fp32"], "--precisions: names repeat"),
        (["--precisions", "fp8"], "--precisions: no precision mode 'fp8': did you mean 'fp8-tensorwise' or"),
        (["--experiment", ""], "--experiment: give 1 to 256 characters"),
        (["--matrix", "m" * 3000 + ".yaml"], "..."),
        (["--tracking-uri", "sqlite://"], "name a database file"),
        (["--tracking-uri", "sqlite:///."], "is not a file"),
        (["--tracking-uri", "postgresql://u:pw@127.0.0.1:9/db"], "is not usable"),
    ],
)
def test_bad_options(tmp_path, args, expected):
    _write(tmp_path / "m.yaml", VALID)
    _write(tmp_path / "a-file", "not a folder")
    base = {"--matrix": "m.yaml", "--out": "out"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    extra = [item for key, value in base.items() for item in (key, value)]
    extra += [a for a in args if a not in base and a not in base.values()]
    result = run_measured("run", *extra, cwd=tmp_path)
    assert_refused(result, expected, seconds=30, peak_mb=1500)  # a database URI loads MLflow first
    assert len(result["stderr"]) < 600 and "pw@" not in result["stderr"]


def _matrix_text(mutate) -> str:
    matrix = tiny_matrix()
    mutate(matrix)
    return yaml.safe_dump(matrix)


def _misspell(matrix: dict) -> None:
    matrix["precison"] = matrix.pop("precisions")
    matrix["workloads"][0]["batch_size"] = matrix["workloads"][0].pop("batch_sizes")


# A typo in a key or a name: said once, as the typo, with the name it is likely meant to be.
TYPOS = {
    "a key": (
        ["run", "--matrix", "m.yaml"],
        _matrix_text(lambda m: m["workloads"][0].update(batch_size=m["workloads"][0].pop("batch_sizes"))),
        ["matrix m.yaml: workloads.0: unknown key 'batch_size': did you mean 'batch_sizes'?"],
    ),
    "two keys: a line each": (
        ["run", "--matrix", "m.yaml"],
        _matrix_text(_misspell),
        [
            "matrix m.yaml: 2 problems:",
            "  unknown key 'precison': did you mean 'precisions'?",
            "  workloads.0: unknown key 'batch_size': did you mean 'batch_sizes'?",
        ],
    ),
    "a shipped matrix's name": (
        ["run", "--matrix", "smok"],
        VALID,
        ["matrix smok: no such file, nor a shipped matrix of that name: did you mean 'smoke' or 'ddp-smoke'?"],
    ),
    "a mode the matrix does not run": (
        ["run", "--matrix", "m.yaml", "--precisions", "fp16"],
        yaml.safe_dump(tiny_matrix(precisions=["fp32", "bf16"])),
        ["--precisions: fp16 is a precision mode this matrix does not run (this matrix runs fp32, bf16)"],
    ),
    "a store that is not SQLite": (
        ["ui", "--store", "m.yaml"],
        VALID,
        ["--store m.yaml: not a SQLite database (an MLflow store is one, e.g. mlflow.db)"],
    ),
}


@pytest.mark.parametrize("case", TYPOS, ids=list(TYPOS))
def test_a_typo_is_said_as_one_with_what_was_meant(tmp_path, case):
    args, content, expected = TYPOS[case]
    _write(tmp_path / "m.yaml", content)
    out = ["--out", "out"] if args[0] == "run" else []  # where a run would write, had it started
    result = run_measured(*args, *out, cwd=tmp_path)
    assert result["code"] == 2, result
    assert result["stderr"].splitlines() == [f"amp-suite: error: {expected[0]}", *expected[1:]], result["stderr"]
    assert result["seconds"] < 10 and result["peak_mb"] < 400, result  # refused before torch loads
    assert sorted(path.name for path in tmp_path.iterdir()) == ["m.yaml"]  # nothing written


@pytest.mark.parametrize("entry", ["results.jsonl", "invocations.jsonl", "mlflow.db", "logs"])
def test_what_the_out_folder_holds_must_be_what_a_run_writes(tmp_path, entry):
    _write(tmp_path / "m.yaml", VALID)
    out = tmp_path / "out"
    out.mkdir()
    if entry == "logs":
        (out / entry).write_text("a file where the log folder goes")
    else:
        (out / entry).symlink_to("/dev/full")  # reading it would never end
    result = run_measured("run", "--matrix", "m.yaml", "--out", str(out), cwd=tmp_path)
    assert_refused(result, f"{out / entry} is not a {'folder' if entry == 'logs' else 'file'}")


def test_a_password_in_a_bad_tracking_uri_is_never_echoed(tmp_path):
    _write(tmp_path / "m.yaml", VALID)
    uri = "ftp://admin:hunter2@host/x"
    result = run_measured("run", "--matrix", "m.yaml", "--tracking-uri", uri, cwd=tmp_path)
    assert_refused(result, "ftp://admin:***@host/x")
    assert "hunter2" not in result["stdout"] + result["stderr"]


@pytest.fixture
def no_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this checks the message for a machine without a GPU")


def test_a_gpu_required_by_the_image_but_not_visible_is_an_error_not_a_cpu_run(tmp_path, no_gpu):
    _write(tmp_path / "m.yaml", VALID)
    started = time.monotonic()
    image = {"AMP_SUITE_DEVICE": "cuda", "AMP_SUITE_IMAGE_BASE": "nvidia/cuda"}  # as the Dockerfile sets them
    result = run_measured("run", "--matrix", "m.yaml", cwd=tmp_path, env=image)
    assert_refused(result, "--device cuda (AMP_SUITE_DEVICE in this image): no CUDA GPU is visible", 30, 1500)
    assert "--gpus all" in result["stderr"] and "--device cpu" in result["stderr"]
    assert not (tmp_path / "runs").exists() and time.monotonic() - started < 30


def test_outside_the_image_falling_back_to_the_cpu_is_announced(tmp_path, no_gpu):
    _write(tmp_path / "m.yaml", yaml.safe_dump(tiny_matrix(precisions=["fp32"])))
    done = subprocess.run([sys.executable, "-m", "amp_suite", "run", "--matrix", "m.yaml", "--out", "out"],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("No CUDA GPU is visible to PyTorch: running on the CPU.")


def test_sync_refuses_what_is_not_a_run_folder(tmp_path):
    result = run_measured("sync", str(tmp_path), cwd=tmp_path)
    assert_refused(result, "not a run folder (no results.jsonl or invocations.jsonl)")


def test_ui_on_all_interfaces_warns_that_the_store_has_no_login(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mlflow.db").touch()
    command = [sys.executable, "-m", "amp_suite", "ui", "--out", str(out), "--host", "0.0.0.0",
               "--port", str(free_port())]  # fmt: skip
    ui = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stderr=subprocess.PIPE, text=True,
                          start_new_session=True)  # fmt: skip
    try:
        first = ui.stderr.readline()  # printed before the MLflow server takes over the process
    finally:
        os.killpg(ui.pid, signal.SIGKILL)  # the server and the workers it started
        ui.wait(timeout=30)
    assert first.startswith("amp-suite: warning: serving") and "without authentication" in first
    quiet = subprocess.run([sys.executable, "-c", "from amp_suite.cli import _is_loopback as f;"
                            "print(f('127.0.0.1'), f('::1'), f('localhost'), f('0.0.0.0'), f('example.com'))"],
                           capture_output=True, text=True)  # fmt: skip
    assert quiet.stdout.split() == ["True", "True", "True", "False", "False"]


REFERENCE_FILE = yaml.safe_dump({"references": [{
    "id": "Not A Valid Id", "source": {"document": "d", "table": "t", "date": "2024", "url": "https://example.com"},
    "gpu": "A100", "model": "resnet50", "config": {}, "precision": "fp16", "metric": "throughput",
    "unit": "images/s", "value": 1.0,
}]})  # fmt: skip  (one problem, the id: every other field is given)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["missing"], "missing: no such run folder or results file (to read an MLflow experiment"),
        (["empty-folder"], "empty-folder: not a run folder (no results.jsonl in it)"),
        (["empty.jsonl"], "no records in empty.jsonl: nothing to report"),
        (["empty.jsonl", "--format", "html,pdf"], "--format: unknown ['pdf']"),
        (["empty.jsonl", "--references", "nvidia"], "--references: no file or shipped set named 'nvidia'"),
        (["empty.jsonl", "--references", "refs.yaml"], "refs.yaml: references.0.id: String should match"),
        (["empty.jsonl", "--out", "empty.jsonl"], "--out empty.jsonl: exists and is not a folder"),
        (["empty.jsonl", "--baseline", "fp16"], "Invalid value for '--baseline'"),
    ],
)
def test_bad_report_input(tmp_path, args, expected):
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "empty.jsonl").touch()
    _write(tmp_path / "refs.yaml", REFERENCE_FILE)
    result = run_measured("report", *args, cwd=tmp_path)
    if args[-1] == "fp16":  # typer's own parse error: exit 2 and the option named, in its own box
        assert result["code"] == 2 and expected in result["stderr"], result
        return
    assert_refused(result, expected)
    assert not (tmp_path / "report").exists()
