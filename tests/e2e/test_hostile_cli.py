"""The command line itself as hostile input, through the CLI: a terminal width of 0, a stdout that
is closed or full, usage errors, URIs long enough to make a regex backtrack, a HOME nothing can
be written to, an ASCII-only locale and an empty --out. Each case failed before its fix (issue 39)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, cli_env, embedded, runs_in, tiny_matrix
from support.refusals import assert_refused, run_measured

from amp_suite.tracking.uri import mask_credentials

pytestmark = pytest.mark.slow

CPU = ("--device", "cpu")
MATRIX = tiny_matrix(precisions=["fp32"])  # named "tiny": one cell, seconds


def _one_line_error(done: subprocess.CompletedProcess, expected: str, code: int = 2) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    stderr = done.stderr
    assert stderr.count("\n") == 1 and stderr.startswith("amp-suite: error: "), stderr
    assert "Traceback" not in stderr and expected in stderr, stderr


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run folder of the one-cell matrix, with its matrix beside it."""
    root = tmp_path_factory.mktemp("finished")
    (root / "m.yaml").write_text(yaml.safe_dump(MATRIX))
    done = amp_suite("run", "--matrix", "m.yaml", "--out", "out", *CPU, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def _copy(finished: Path, tmp_path: Path) -> Path:
    shutil.copy(finished / "m.yaml", tmp_path / "m.yaml")
    return Path(shutil.copytree(finished / "out", tmp_path / "out"))


def _shell(command: str, *args: str, cwd: Path, env: dict[str, str] | None = None):
    """The CLI under a shell redirection: `"$AMP" ARGS... >&-` and the like."""
    line = f'{shlex_join([sys.executable, "-m", "amp_suite"])} "$@" {command}'
    return subprocess.run(
        ["sh", "-c", line, "sh", *args], cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=300
    )


def shlex_join(words: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(word) for word in words)


# -- item 8: COLUMNS=0 -----------------------------------------------------------------------------


def test_a_terminal_width_of_zero_still_prints_everything(finished):
    narrow = {"COLUMNS": "0"}
    shown = amp_suite("summary", "out", cwd=finished, env=narrow)
    assert shown.returncode == 0, shown.stderr
    assert "fp32" in shown.stdout and "The answer on" in shown.stdout, shown.stdout
    refused = amp_suite("run", "--matrix", "missing.yaml", "--out", "nothing", *CPU, cwd=finished, env=narrow)
    _one_line_error(refused, "missing.yaml")
    helped = amp_suite("--help", cwd=finished, env=narrow)
    assert helped.returncode == 0 and "summary" in helped.stdout, helped.stdout


# -- item 9: a stdout that is closed or full -------------------------------------------------------


def test_a_closed_stdout_is_one_line_on_stderr_not_a_traceback(finished):
    done = _shell(">&-", "summary", "out", cwd=finished)
    _one_line_error(done, "the output could not be written", code=5)


def test_a_full_stdout_still_finishes_the_run_writes_its_report_and_ends_its_parent_run(finished, tmp_path):
    out = _copy(finished, tmp_path)
    shutil.rmtree(out / "report")
    done = _shell(">/dev/full", "run", "--matrix", "m.yaml", "--out", "out", "--resume", *CPU, cwd=tmp_path)
    _one_line_error(done, "No space left on device", code=5)
    assert (out / "report" / "report.html").is_file()  # the work was done, only its words were lost
    parents, _ = runs_in(embedded(out), "tiny")
    assert sorted(run.info.status for run in parents) == ["FINISHED", "FINISHED"], parents


# -- item 21: usage errors -------------------------------------------------------------------------

USAGE_ERRORS = {
    "an unknown baseline": (["report", "out", "--baseline", "fp16"], "--baseline"),
    "an unknown device": (["run", "--device", "tpu"], "--device"),
    "a port past 65535": (["ui", "--port", "70000"], "--port"),
    "an extra argument": (["ui", "extra"], "unexpected extra argument"),
    "an unknown option": (["summary", "out", "--nope"], "--nope"),
    "a missing argument": (["report"], "Missing argument"),
    "an unknown command": (["runn"], "runn"),
}


@pytest.mark.parametrize("case", USAGE_ERRORS, ids=list(USAGE_ERRORS))
def test_every_usage_error_is_one_line(finished, case):
    args, expected = USAGE_ERRORS[case]
    done = amp_suite(*args, cwd=finished)
    _one_line_error(done, expected)
    assert "╭" not in done.stderr and done.stdout == ""


def test_a_usage_error_from_the_environment_is_one_line(finished):
    done = amp_suite("run", cwd=finished, env={"AMP_SUITE_DEVICE": "tpu"})
    _one_line_error(done, "AMP_SUITE_DEVICE")


# -- item 12: databricks ---------------------------------------------------------------------------


def test_databricks_is_taken_as_a_tracking_uri_not_as_a_file_store(tmp_path):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(MATRIX))
    # No Databricks configuration here (nor a network): MLflow itself says what is missing.
    unconfigured = {"HOME": str(tmp_path), "DATABRICKS_CONFIG_FILE": str(tmp_path / "none.cfg")}
    args = ("run", "--matrix", "m.yaml", "--out", "out", "--tracking-uri", "databricks", *CPU)
    done = amp_suite(*args, cwd=tmp_path, env=unconfigured)
    _one_line_error(done, "Databricks")
    assert "file store" not in done.stderr


# -- item 13: long URIs ----------------------------------------------------------------------------


def test_a_very_long_uri_is_refused_in_linear_time(tmp_path):
    result = run_measured("run", "--tracking-uri", "http://" + "a" * 100_000, cwd=tmp_path)
    assert_refused(result, "not a URI", seconds=4)


# What mask_credentials matched before it was made linear: the masking must not change.
OLD_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:(?P<user>[^/@:\s]*):[^/\s]*|[^/@:\s]+)@")


def _old_mask(text: str) -> str:
    return OLD_CREDENTIALS.sub(lambda m: m["scheme"] + ("***@" if m["user"] is None else f"{m['user']}:***@"), text)


def test_masking_is_unchanged_on_random_text():
    generator = random.Random(39)
    alphabet = "ab1+.-:/@ \t#?"
    for _ in range(20_000):
        text = "".join(generator.choice(alphabet) for _ in range(generator.randrange(1, 24)))
        assert mask_credentials(text) == _old_mask(text), text


# -- item 17: a HOME nothing can be written to -----------------------------------------------------


def _unwritable_home(tmp_path: Path) -> dict[str, str]:
    """HOME below a regular file: nothing can be made there, even by root (a read-only HOME)."""
    (tmp_path / "file").write_text("")
    return {"HOME": str(tmp_path / "file" / "home"), "XDG_CACHE_HOME": ""}


def test_an_unwritable_home_is_refused_once_up_front(tmp_path):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(MATRIX))
    done = amp_suite("run", "--matrix", "m.yaml", "--out", "out", *CPU, cwd=tmp_path, env=_unwritable_home(tmp_path))
    _one_line_error(done, "XDG_CACHE_HOME")
    assert not (tmp_path / "out").exists()


def test_an_unwritable_home_runs_with_a_cache_given(tmp_path):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(MATRIX))
    env = {**_unwritable_home(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = amp_suite("run", "--matrix", "m.yaml", "--out", "out", *CPU, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert any((tmp_path / "cache" / "amp-suite" / "datasets").iterdir())


# -- item 18: an ASCII-only locale -----------------------------------------------------------------

ASCII_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}


@pytest.mark.parametrize(
    "name, env",
    [("out-\u00e9", ASCII_LOCALE), (os.fsdecode(b"out-\xe9"), {})],
    ids=["unicode under an ASCII locale", "not UTF-8"],
)
def test_an_out_name_no_store_uri_can_carry_is_refused_and_nothing_is_left(tmp_path, name, env):
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(MATRIX))
    done = amp_suite("run", "--matrix", "m.yaml", "--out", name, *CPU, cwd=tmp_path, env=env)
    _one_line_error(done, "--out out-")
    assert "UnicodeEncodeError" not in done.stderr and "FileNotFoundError" not in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["m.yaml"]


# -- item 19: an empty --out -----------------------------------------------------------------------


def test_an_empty_out_is_refused(finished, tmp_path):
    before = sorted(os.listdir(finished))
    done = amp_suite("report", "out", "--out", "", cwd=finished)
    _one_line_error(done, "--out")
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(MATRIX))
    done = amp_suite("run", "--matrix", "m.yaml", "--out", "", *CPU, cwd=tmp_path)
    _one_line_error(done, "--out")
    # Nor is a folder to read: `summary ''` read the working directory's records.
    for command in (("sync", ""), ("ui", "--out", ""), ("summary", ""), ("report", "", "--out", "r")):
        _one_line_error(amp_suite(*command, cwd=tmp_path), "empty")
    assert sorted(os.listdir(finished)) == before and sorted(os.listdir(tmp_path)) == ["m.yaml"]
