"""Hostile paths and tracking URIs, through the CLI: each is refused at the edge in one line (exit
2), no secret is echoed, nothing is created outside the folder asked for, and where the input
alone shows the problem it is refused before torch loads (docs/reliability.md promises under 400 MB)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, free_port, runs_in, tiny_matrix
from support.refusals import assert_refused, run_measured

from amp_suite.config import ConfigError
from amp_suite.tracking.uri import check_tracking_uri, embedded_store_uri, mask_credentials

LONG = "x" * 300  # one name over the 255 characters file systems allow
SECRETS = ("tok3nsecret", "my secret", "hunter2")
KERNEL_TREES = ["/proc/amp-suite-hostile", "/sys/amp-suite-hostile", "/dev/amp-suite-hostile"]


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A working directory with a matrix, a symlink loop, an empty results file and a run folder."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "m.yaml").write_text(yaml.safe_dump(tiny_matrix(precisions=["fp32"])))
    (cwd / "machines.yaml").write_text(yaml.safe_dump(tiny_matrix(precisions=["fp32"], machines=["A100"])))
    (cwd / "loop").symlink_to("loop")
    (cwd / "empty.jsonl").touch()
    (cwd / "rd").mkdir()
    (cwd / "rd" / "results.jsonl").touch()
    (cwd / "dangling").mkdir()
    (cwd / "dangling" / "mlflow.db").symlink_to("../outside.db")  # a store written there lands outside
    return cwd


def tree(root: Path) -> list[str]:
    """Every entry under root, symlinks not followed."""
    found = []
    for folder, subfolders, files in os.walk(root):
        found += [os.path.relpath(os.path.join(folder, name), root) for name in subfolders + files]
    return sorted(found)


RUN = ["run", "--matrix", "m.yaml"]
# The runs that finish name the device: with auto, the CLI imports torch to look for a GPU before its
# cells' forkserver starts (a second or more per run); where the store goes does not depend on it.
CPU = ("--device", "cpu")
LOOP = "symbolic links loop"
TOO_LONG = "a name in it is longer than 255 bytes"
REFUSED = {
    # item 4: path errors
    "run --out through a loop": ([*RUN, "--out", "loop/x"], f"--out loop/x: {LOOP}"),
    "run --out a loop": ([*RUN, "--out", "loop"], f"--out loop: {LOOP}"),
    "run --out a long name": ([*RUN, "--out", LONG], TOO_LONG),
    "run --out below a long name": ([*RUN, "--out", f"{LONG}/sub"], TOO_LONG),
    "run --out under /proc": ([*RUN, "--out", KERNEL_TREES[0]], "/proc is a kernel file system"),
    "run --out under /sys": ([*RUN, "--out", KERNEL_TREES[1]], "/sys is a kernel file system"),
    "run --out under /dev": ([*RUN, "--out", KERNEL_TREES[2]], "/dev is a kernel file system"),
    "report a long SOURCE": (["report", LONG], TOO_LONG),
    "report a loop SOURCE": (["report", "loop"], f"loop: {LOOP}"),
    "report --out a long name": (["report", "empty.jsonl", "--out", LONG], TOO_LONG),
    "report --out through a loop": (["report", "empty.jsonl", "--out", "loop/x"], f"--out loop/x: {LOOP}"),
    "sync a long RUN_DIR": (["sync", LONG], TOO_LONG),
    "sync a loop": (["sync", "loop"], f"loop: {LOOP}"),
    "ui --out a long name": (["ui", "--out", LONG], TOO_LONG),
    "ui --out a loop": (["ui", "--out", "loop"], f"--out loop: {LOOP}"),
    "run --out holding a link to nothing": ([*RUN, "--out", "dangling"], "is a symbolic link; the suite"),
    # item 5: tracking URIs parsed fully, drivers checked
    "run a port that is no number": ([*RUN, "--tracking-uri", "http://127.0.0.1:abc"], "port must be a number"),
    "run a port out of range": ([*RUN, "--tracking-uri", "http://127.0.0.1:99999"], "port must be a number"),
    "report a port that is no number": (["report", "exp", "--tracking-uri", "http://127.0.0.1:abc"], "port must be"),
    "sync a port that is no number": (["sync", "rd", "--tracking-uri", "http://h:abc"], "port must be a number"),
    "report postgresql without its driver": (
        ["report", "exp", "--tracking-uri", "postgresql://u@h/db"],
        "driver psycopg is not installed: pip install 'psycopg[binary]'",
    ),
    "run postgresql+psycopg2 without it": (
        [*RUN, "--tracking-uri", "postgresql+psycopg2://u:hunter2@h/db"],
        "postgresql+psycopg2://u:***@h/db is not usable: its database driver psycopg2 is not installed",
    ),
    "sync mysql without its driver": (["sync", "rd", "--tracking-uri", "mysql://u@h/db"], "pip install mysqlclient"),
    # item 6: a user's sqlite URI with a query where a file name was meant
    "run sqlite with a '?' in the path": (
        [*RUN, "--tracking-uri", "sqlite:///q?mode=ro/mlflow.db"],
        "write a '?' in a file name as %3F",
    ),
    # item 11: credentials masked in every form
    "a token as the user part": ([*RUN, "--tracking-uri", "ftp://tok3nsecret@host/x"], "ftp://***@host/x"),
    "a password with a space": ([*RUN, "--tracking-uri", "http://u:my secret@host"], "http://u:***@host: not a URI"),
    # lower items: reading needs an existing store; input-only refusals before torch
    "report a missing sqlite store": (["report", "exp", "--tracking-uri", "sqlite:///typo.db"], "no MLflow store at"),
    "run machines without --ray": (["run", "--matrix", "machines.yaml"], "machines: the matrix runs once per GPU"),
    "run --gpus on the CPU": ([*RUN, "--device", "cpu", "--gpus", "2"], "--gpus runs cells on CUDA GPUs"),
}


# These cases need their driver missing (it is not a dependency); a box that has it connects.
DRIVERS = {"without its driver": "psycopg", "without it": "psycopg2", "mysql": "MySQLdb"}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_hostile_input_is_refused_at_the_edge(place, case):
    args, expected = REFUSED[case]
    for words, module in DRIVERS.items():
        if words in case and importlib.util.find_spec(module) is not None:
            pytest.skip(f"{module} is installed here")
    before = tree(place)
    try:
        result = run_measured(*args, cwd=place)
        created = [path for path in KERNEL_TREES if Path(path).exists()]
    finally:  # as root, a run could make a folder in /dev: leave none behind
        shutil.rmtree(KERNEL_TREES[2], ignore_errors=True)
    assert_refused(result, expected)
    assert not any(secret in result["stdout"] + result["stderr"] for secret in SECRETS), result
    assert tree(place) == before  # nothing created: no ./q, ./mlruns, typo.db or run folder
    assert not created


def test_a_token_is_masked_when_the_server_is_unreachable(place):
    uri = f"http://tok3nsecret@127.0.0.1:{free_port()}"  # nothing listens: known only once asked
    result = run_measured(*RUN, "--out", "out", "--tracking-uri", uri, cwd=place)
    assert_refused(result, f"{uri.replace('tok3nsecret', '***')} is not usable", seconds=30, peak_mb=1500)
    assert "tok3nsecret" not in result["stdout"] + result["stderr"]


@pytest.mark.parametrize(
    "text, masked",
    [
        ("http://tok3nsecret@host/x", "http://***@host/x"),
        ("see https://tok3nsecret@h:5000 and http://a:b@c", "see https://***@h:5000 and http://a:***@c"),
        ("postgresql+psycopg2://mlflow:p@ss@db/mlflow", "postgresql+psycopg2://mlflow:***@db/mlflow"),
        ("http://host:5000/x a@b", "http://host:5000/x a@b"),
    ],
)
def test_every_userinfo_form_is_masked(text, masked):
    assert mask_credentials(text) == masked


@pytest.mark.parametrize("uri", ["http://u:my secret@host", "http://tok3n secret@host", "ftp://" + "t" * 300 + "@h/x"])
def test_a_refused_uri_is_shown_without_its_userinfo(uri):
    with pytest.raises(ConfigError) as raised:
        check_tracking_uri(uri)
    assert "secret" not in str(raised.value) and "t" * 50 not in str(raised.value), raised.value


@pytest.mark.parametrize("name", ["q?mode=ro", "a#b", "p%41", "sp ace", "ü"])
def test_the_embedded_store_uri_names_the_file_in_the_folder(tmp_path, name):
    from sqlalchemy.engine.url import make_url

    database = make_url(embedded_store_uri(tmp_path / name)).database
    assert database == str((tmp_path / name / "mlflow.db").resolve())


def test_an_out_folder_named_like_a_query_keeps_its_store_inside(place):
    out = place / "q?mode=ro"
    before = set(os.listdir(place))
    done = amp_suite(*RUN, "--out", out.name, *CPU, cwd=place)
    assert done.returncode == 0, done.stderr
    assert (out / "mlflow.db").is_file() and (out / "mlartifacts").is_dir()
    assert not (place / "q").exists() and not (place / "mlruns").exists()
    assert set(os.listdir(place)) == before | {out.name}  # nor a folder named q%3Fmode%3Dro
    assert len(runs_in(embedded_store_uri(out), "tiny")[1]) == 1  # the cell's run is in that store


def test_a_given_sqlite_store_keeps_its_artifacts_beside_it(place, tmp_path):
    store = tmp_path / "store#1"
    store.mkdir()
    before = set(os.listdir(place))
    done = amp_suite(*RUN, "--out", "out", "--tracking-uri", f"sqlite:///{store}/mlflow.db", *CPU, cwd=place)
    assert done.returncode == 0, done.stderr
    assert (store / "mlartifacts").is_dir() and not (place / "out" / "mlflow.db").exists()
    synced = amp_suite("sync", "out", cwd=place)  # into the folder's own store, made by sync
    assert synced.returncode == 0, synced.stderr
    assert (place / "out" / "mlartifacts").is_dir()
    assert set(os.listdir(place)) == before | {"out"}  # no ./mlruns
    assert sorted(os.listdir(tmp_path)) == ["cwd", "store#1"]
