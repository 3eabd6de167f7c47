"""A matrix that names an entry runs the user's code: through `amp-suite run` and `inspect`, the
suite calls only what is declared a workload builder, never the standard library's functions, gives
the entry check a time limit, ends its whole process tree on a stop, and names every way the
user's code can end (a clean exit, a signal, a changed TF32 flag, too many parameters) in one line,
exit 2, before any cell. Output and args of any size and encoding go through."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, cli_env, process_alive, read_records, start_amp_suite, wait_for
from support.refusals import assert_refused, run_measured

# Declared builders (-> UserWorkload) that each go wrong in one way; `tiny` is the one that doesn't.
ENTRIES = """
import ctypes
import os
import signal
import sys
from pathlib import Path

import torch
from amp_suite import UserWorkload


def tiny(**ignored) -> UserWorkload:
    data = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(64, 4, generator=data), torch.randint(0, 2, (64,), generator=data)
    return UserWorkload(torch.nn.Linear(4, 2), train=(inputs, targets), validation=(inputs, targets))


def exits_cleanly() -> UserWorkload:
    sys.exit(0)


def exits_hard() -> UserWorkload:
    os._exit(0)


def kills_itself() -> UserWorkload:
    os.kill(os.getpid(), signal.SIGKILL)


def segfaults() -> UserWorkload:
    ctypes.string_at(0)


def turns_tf32_on() -> UserWorkload:
    torch.backends.cuda.matmul.allow_tf32 = True
    return tiny()


def lowers_matmul_precision() -> UserWorkload:
    torch.set_float32_matmul_precision("medium")
    return tiny()


def computes_fp32_in_bf16_on_the_cpu() -> UserWorkload:
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"
    return tiny()


def too_many_parameters() -> UserWorkload:
    built = tiny()
    with torch.device("meta"):  # 4.9e9 parameters, none of them allocated
        model = torch.nn.Linear(70_000, 70_000)
    return UserWorkload(model, train=built.train, validation=built.validation)


def noisy(blob: str = "", seen: str = "") -> UserWorkload:
    os.write(1, b"stdout \\xff\\xfe\\x80 not UTF-8\\n" * 1000)
    os.write(2, b"stderr \\xc3\\x28 not UTF-8\\n" * 1000)
    Path(seen).write_text(str(len(blob)))
    return tiny()


def noisy_failure() -> UserWorkload:
    os.write(2, b"\\xff\\xfe\\x80\\n")
    raise ValueError("a message with a lone surrogate \\udcff in it")


def undeclared(path: str):
    Path(path).write_text("the undeclared entry ran")
    return tiny()
"""


def user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "entries.py").write_text(ENTRIES)
    return folder


def write_matrix(folder: Path, *workloads: dict, name: str = "mine") -> Path:
    matrix = {"name": name, "seed": 0, "warmup_steps": 2, "steps": 4, "stopping": "fixed", "precisions": ["fp32"],
              "workloads": [{"workload": "custom", "batch_sizes": [8], **w} for w in workloads]}  # fmt: skip
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


def run_refused(folder: Path, workload: dict, expected: str, seconds: float = 20, env=None) -> dict:
    """`amp-suite run` of a one-entry matrix: refused in one line, exit 2, nothing written."""
    matrix = write_matrix(folder, workload)
    result = run_measured("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=folder, env=env)
    assert_refused(result, expected, seconds=seconds, peak_mb=2000)
    assert not (folder / "out" / "results.jsonl").exists()
    return result


# -- 52.3: only a declared builder is called, never the standard library ------------------


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "data.txt").write_text("keep me")
    return folder


def standard_library_entries(victim: Path) -> dict[str, dict]:
    made = str(victim / "made")
    return {
        "shutil:rmtree": {"path": str(victim)},
        "os:system": {"command": f"touch {made}"},
        "subprocess:run": {"args": ["touch", made]},
        "builtins:eval": {"source": f"open({made!r}, 'w')"},
        "os.path:exists": {"path": made},  # a submodule of one
    }


@pytest.mark.parametrize("entry", ["shutil:rmtree", "os:system", "subprocess:run", "builtins:eval", "os.path:exists"])
def test_a_standard_library_function_is_refused_without_being_imported_or_called(tmp_path, victim, entry):
    folder = user_folder(tmp_path)
    args = standard_library_entries(victim)[entry]
    run_refused(folder, {"entry": entry, "args": args}, "is Python's own", seconds=10)
    assert (victim / "data.txt").read_text() == "keep me" and not (victim / "made").exists()


def test_inspect_refuses_a_standard_library_entry_too(tmp_path, victim):
    folder = user_folder(tmp_path)
    matrix = write_matrix(folder, {"entry": "shutil:rmtree", "args": {"path": str(victim)}, "label": "rm"})
    result = run_measured("inspect", "--matrix", str(matrix), "--workload", "rm", "--precision", "fp32",
                          "--device", "cpu", cwd=folder)  # fmt: skip
    assert_refused(result, "shutil:rmtree: shutil is Python's own")
    assert (victim / "data.txt").read_text() == "keep me"


def test_model_refuses_a_standard_library_entry(tmp_path):
    result = run_measured("run", "--model", "os:getcwd", "--out", "out", "--device", "cpu", cwd=tmp_path)
    assert_refused(result, "os:getcwd: os is Python's own")


UNDECLARED_AT_IMPORT = """
from pathlib import Path

Path(__file__).with_name("imported").write_text("the module was imported")


def build():
    Path(__file__).with_name("called").write_text("the entry was called")
"""


def test_an_undeclared_entry_is_refused_before_it_is_imported_or_called(tmp_path):
    folder = user_folder(tmp_path)
    (folder / "plain.py").write_text(UNDECLARED_AT_IMPORT)
    run_refused(folder, {"entry": "plain.py:build"}, "build is not declared a workload builder", seconds=10)
    assert not (folder / "imported").exists() and not (folder / "called").exists()
    # The same for a module entry, and for a function declared in a file but not returning UserWorkload.
    run_refused(folder, {"entry": "plain:build"}, "build is not declared a workload builder", seconds=10)
    run_refused(folder, {"entry": "entries.py:undeclared", "args": {"path": str(folder / "called")}},
                "undeclared is not declared a workload builder", seconds=10)  # fmt: skip
    assert not (folder / "imported").exists() and not (folder / "called").exists()


def test_inspect_refuses_an_undeclared_entry(tmp_path):
    folder = user_folder(tmp_path)
    (folder / "plain.py").write_text(UNDECLARED_AT_IMPORT)
    matrix = write_matrix(folder, {"entry": "plain.py:build", "label": "plain"})
    result = run_measured("inspect", "--matrix", str(matrix), "--workload", "plain", "--precision", "fp32",
                          "--device", "cpu", cwd=folder)  # fmt: skip
    assert_refused(result, "build is not declared a workload builder")
    assert not (folder / "imported").exists() and not (folder / "called").exists()


# -- 52.1: the entry check has a time limit, and a stop ends its whole process tree ----------

# Declared, but its import never ends: it forks a grandchild first, and both spin.
LOOPS_AT_IMPORT = """
import os
from pathlib import Path

here = Path(__file__).parent
if os.fork() == 0:
    (here / "grandchild.pid").write_text(str(os.getpid()))
    while True:
        pass
(here / "child.pid").write_text(str(os.getpid()))
while True:
    pass


def build() -> "UserWorkload":
    pass
"""


@pytest.fixture
def looping(tmp_path: Path):
    """A folder whose entry loops at import; whatever it started is killed after the test."""
    folder = user_folder(tmp_path)
    (folder / "loops.py").write_text(LOOPS_AT_IMPORT)
    yield folder
    for name in ("child.pid", "grandchild.pid"):
        pid_file = folder / name
        if pid_file.exists() and process_alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def started_pids(folder: Path) -> list[int]:
    files = [folder / "child.pid", folder / "grandchild.pid"]
    wait_for(lambda: all(f.exists() and f.read_text() for f in files), 60, "the entry's processes to start")
    return [int(f.read_text()) for f in files]


def test_an_entry_that_never_returns_is_stopped_by_the_check_limit_with_its_children(looping):
    # 10 s: the check's child imports torch (a few seconds on a busy machine) before the entry loops.
    started = time.monotonic()
    run_refused(looping, {"entry": "loops.py:build"}, "entry check still running after 10 s",
                seconds=30, env={"AMP_SUITE_ENTRY_CHECK_S": "10"})  # fmt: skip
    assert time.monotonic() - started < 30
    pids = started_pids(looping)
    wait_for(lambda: not any(process_alive(pid) for pid in pids), 5, "the entry's processes to end")


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_during_the_entry_check_ends_its_process_tree_with_the_signals_exit_code(looping, sent):
    matrix = write_matrix(looping, {"entry": "loops.py:build"})
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=looping)
    try:
        pids = started_pids(looping)
        stopped = time.monotonic()
        run.send_signal(sent)
        stdout, stderr = run.communicate(timeout=20)
    finally:
        run.kill()
    assert run.returncode == 128 + sent, (run.returncode, stderr)
    assert f"stopped by {sent.name}" in stderr and "Traceback" not in stderr, stderr
    wait_for(lambda: not any(process_alive(pid) for pid in pids), 10, "the entry's processes to end")
    assert time.monotonic() - stopped < 10
    assert not (looping / "out" / "results.jsonl").exists()


def test_a_killed_amp_suite_leaves_no_entry_check_behind(looping):
    matrix = write_matrix(looping, {"entry": "loops.py:build"})
    run = start_amp_suite("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=looping)
    try:
        pids = started_pids(looping)
        run.kill()  # SIGKILL: nothing in amp-suite runs after it
        run.communicate(timeout=20)
    finally:
        run.kill()
    wait_for(lambda: not any(process_alive(pid) for pid in pids), 10, "the entry's processes to end")


# -- 52.6: every way the user's code can end is named ------------------------------------

EXITS_AT_IMPORT = """
raise SystemExit(0)


def build() -> "UserWorkload":
    pass
"""


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("entries.py:exits_cleanly", "exits_cleanly called sys.exit(0) while it was being called"),
        ("exits.py:build", "exits.py:build called sys.exit(0) while it was being imported"),
        ("entries.py:exits_hard", "exits_hard ended its process (exit code 0) before it returned"),
        ("entries.py:kills_itself", "entry check was killed by SIGKILL"),
        ("entries.py:segfaults", "entry check was killed by SIGSEGV"),
    ],
)
def test_an_entry_that_exits_or_dies_is_a_named_failure_never_a_pass(tmp_path, entry, says):
    folder = user_folder(tmp_path)
    (folder / "exits.py").write_text(EXITS_AT_IMPORT)
    run_refused(folder, {"entry": entry}, says)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("exits_cleanly", "exits_cleanly called sys.exit(0) while it was being called"),
        ("turns_tf32_on", "turns_tf32_on changed the fp32 math: "),
    ],
)
def test_inspect_checks_the_entry_as_run_does_before_it_runs_a_step(tmp_path, entry, says):
    """`amp-suite inspect` runs the step in its own process: the entry check, in a child under its
    limit, comes first, so an entry that exits or changes the math is one line there too."""
    folder = user_folder(tmp_path)
    matrix = write_matrix(folder, {"entry": f"entries.py:{entry}", "label": "mine"})
    result = run_measured("inspect", "--matrix", str(matrix), "--workload", "mine", "--precision", "fp32",
                          "--device", "cpu", cwd=folder)  # fmt: skip
    assert_refused(result, says, seconds=20, peak_mb=2000)  # inspect looks for a GPU: torch is loaded


@pytest.mark.parametrize(
    ("entry", "flag"),
    [
        ("turns_tf32_on", "torch.backends.cuda.matmul.allow_tf32"),
        ("lowers_matmul_precision", "torch.get_float32_matmul_precision()"),
        ("computes_fp32_in_bf16_on_the_cpu", "torch.backends.mkldnn.matmul.fp32_precision"),
    ],
)
def test_an_entry_that_changes_the_fp32_math_flags_is_refused_naming_the_flag(tmp_path, entry, flag):
    folder = user_folder(tmp_path)
    result = run_refused(folder, {"entry": f"entries.py:{entry}"}, f"{entry} changed the fp32 math: ")
    assert flag in result["stderr"]


def test_an_entry_over_the_parameter_limit_is_refused(tmp_path):
    folder = user_folder(tmp_path)
    run_refused(folder, {"entry": "entries.py:too_many_parameters"}, "4.90e+09 parameters; the limit is 4e+09")


def test_output_that_is_not_utf8_from_a_failing_entry_is_one_line(tmp_path):
    folder = user_folder(tmp_path)
    run_refused(folder, {"entry": "entries.py:noisy_failure"}, "raised ValueError: a message with a lone surrogate")


@pytest.mark.slow
def test_output_and_args_of_any_size_and_encoding_go_through(tmp_path):
    """200 KB of args (more than one argument of a command line may hold) and output that is not
    UTF-8 on both streams, from the entry check and from the cell."""
    folder = user_folder(tmp_path)
    args = {"blob": "x" * 200_000, "seen": str(folder / "seen")}
    matrix = write_matrix(folder, {"entry": "entries.py:noisy", "args": args})
    done = amp_suite("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=folder)
    assert done.returncode in (0, 4), done.stdout + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (record,) = read_records(folder / "out")
    assert record["status"] == "ok", record.get("reason")
    assert (folder / "seen").read_text() == "200000"


# -- 52.6: --resume sees a changed entry ---------------------------------------------------


@pytest.mark.slow
def test_resume_after_the_entry_file_changed_runs_the_cell_again(tmp_path):
    folder = user_folder(tmp_path)
    matrix = write_matrix(folder, {"entry": "entries.py:tiny"})
    first = amp_suite("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=folder)
    assert first.returncode in (0, 4), first.stdout + first.stderr
    (record,) = read_records(folder / "out")
    assert record["config"]["workload"]["source_digest"]
    entries = folder / "entries.py"
    entries.write_text(ENTRIES.replace("torch.nn.Linear(4, 2)", "torch.nn.Sequential(torch.nn.Linear(4, 2))"))
    again = amp_suite("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", "--resume", cwd=folder)
    assert again.returncode in (0, 4), again.stdout + again.stderr
    records = read_records(folder / "out")
    assert len(records) == 2 and records[0]["config_hash"] != records[1]["config_hash"]


def test_the_source_digest_follows_the_entry_file_and_its_neighbours(tmp_path):
    """What --resume compares: the config hash holds a digest of the entry's file and the Python
    files beside it (what it imports as neighbours); the same files read again, the same hash."""
    from amp_suite.config.loading import load_matrix

    folder = user_folder(tmp_path)
    (folder / "helper.py").write_text("WIDTH = 4\n")
    path = write_matrix(folder, {"entry": "entries.py:tiny"})

    def config_hash() -> str:
        (cell,) = load_matrix(path).cells("cpu")
        return cell.config_hash

    first = config_hash()
    assert config_hash() == first
    (folder / "helper.py").write_text("WIDTH = 8\n")
    assert config_hash() != first


# -- 52.5: a Hugging Face folder's own code never runs unless the matrix says so ------------

REMOTE_CONFIGURATION = """
from pathlib import Path

from transformers import PretrainedConfig

Path(MARKER).write_text("yes")  # transformers runs a copy of this file, kept in its own cache


class TinyRemoteConfig(PretrainedConfig):
    model_type = "tiny-remote"
"""


def remote_code_folder(tmp_path: Path, model_type: str) -> Path:
    folder = tmp_path / "remote-model"
    folder.mkdir()
    config = {"model_type": model_type, "auto_map": {"AutoConfig": "configuration_tiny.TinyRemoteConfig"},
              "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    marker = f"MARKER = {str(tmp_path / 'remote-code-ran')!r}\n"
    (folder / "configuration_tiny.py").write_text(marker + REMOTE_CONFIGURATION)
    return folder


def hf_matrix(tmp_path: Path, model: str, **extra) -> Path:
    matrix = {"name": "hf", "seed": 0, "warmup_steps": 2, "steps": 4, "precisions": ["fp32"],
              "workloads": [{"workload": "hf", "model": model, "batch_sizes": [4], "samples": 16, "seq_len": 16,
                             "data": {"source": "synthetic", "val_samples": 8}, **extra}]}  # fmt: skip
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    return path


@pytest.mark.parametrize("model_type", ["tiny-remote", "llama"])
def test_a_folder_with_remote_code_is_refused_in_one_line_and_never_prompts(tmp_path, model_type):
    folder = remote_code_folder(tmp_path, model_type)
    matrix = hf_matrix(tmp_path, folder.name)
    command = [sys.executable, "-m", "amp_suite", "run", "--matrix", str(matrix), "--out", "out", "--device", "cpu"]
    # A CI step's `yes |`: a prompt would read it, and run the folder's code.
    done = subprocess.run(command, cwd=tmp_path, env=cli_env(), input="y\n" * 1000, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "auto_map" in lines[0] and "trust_remote_code: true" in lines[0], done.stderr
    assert "[y/N]" not in done.stdout + done.stderr
    assert not (tmp_path / "remote-code-ran").exists()
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_inspect_refuses_a_folder_with_remote_code(tmp_path):
    folder = remote_code_folder(tmp_path, "tiny-remote")
    matrix = hf_matrix(tmp_path, folder.name)
    result = run_measured("inspect", "--matrix", str(matrix), "--workload", "remote-model", "--precision", "fp32",
                          "--device", "cpu", cwd=tmp_path)  # fmt: skip
    assert_refused(result, "auto_map")
    assert not (tmp_path / "remote-code-ran").exists()


def test_trust_remote_code_true_runs_the_folders_code_as_asked(tmp_path):
    """The explicit flag is what lets the folder's code run: the check loads its configuration class
    (and then finds no model for the task: the folder has no modelling code)."""
    folder = remote_code_folder(tmp_path, "tiny-remote")
    matrix = hf_matrix(tmp_path, folder.name, trust_remote_code=True)
    env = {"HF_HOME": str(tmp_path / "hf-home")}  # where transformers copies the folder's modules
    result = run_measured("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=tmp_path, env=env)
    assert_refused(result, "tiny-remote has no causal-lm model", seconds=30, peak_mb=2000)
    assert (tmp_path / "remote-code-ran").read_text() == "yes"


def test_a_70b_config_is_refused_by_the_parameter_limit_before_anything_is_allocated(tmp_path):
    import transformers

    transformers.LlamaConfig(
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
    ).save_pretrained(tmp_path / "llama-70b")  # fmt: skip
    matrix = hf_matrix(tmp_path, "llama-70b")
    result = run_measured("run", "--matrix", str(matrix), "--out", "out", "--device", "cpu", cwd=tmp_path)
    assert_refused(result, "llama-70b: the model has 7.06e+10 parameters; the limit is 4e+09", seconds=30,
                   peak_mb=2000)  # fmt: skip
