"""Run folders someone else wrote, and the MLflow stores in them, through the CLI: a record that
names a file outside the folder, a cell's log that links elsewhere, a store whose artifacts point
elsewhere (or a cached template store that does), the `Default` experiment, two syncs at once,
a disk that fills while a store is made, and a store that is not a database. Each case failed
before its fix (issue 39)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import amp_suite, free_port, start_amp_suite, tiny_matrix
from support.refusals import assert_refused, run_measured

pytestmark = pytest.mark.slow

CPU = ("--device", "cpu")
SECRET = "hunter2-not-for-the-store"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A run folder of one fp32 cell of a two-precision matrix (bf16 is left for --resume)."""
    root = tmp_path_factory.mktemp("finished")
    matrix = root / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix(name="hostile", precisions=["fp32", "bf16"])))
    done = amp_suite("run", "--matrix", str(matrix), "--out", str(root / "out"), "--precisions", "fp32", *CPU, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def _copy(finished: Path, tmp_path: Path, name: str = "copy", store: bool = True) -> Path:
    """A copy of the finished folder; without its store (and artifacts), sync makes them anew."""
    copy = Path(shutil.copytree(finished / "out", tmp_path / name))
    if not store:
        (copy / "mlflow.db").unlink()
        shutil.rmtree(copy / "mlartifacts")
    return copy


def _cell_log(out: Path) -> Path:
    return next((out / "logs").glob("mlp_*.log"))


def _artifact_text(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def _rewrite_records(out: Path, **fields) -> None:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    (out / "results.jsonl").write_text("".join(json.dumps({**r, **fields}) + "\n" for r in records))


# -- paths under a run folder: inside it, never through a link, never from a record -------------


def test_sync_never_uploads_a_file_that_a_record_names(finished, tmp_path):
    """A record's log_path is the record's word, not a path to read: only the folder's own logs/
    holds what sync uploads, so a log_path of /proc/self/environ uploads nothing."""
    copy = _copy(finished, tmp_path, store=False)
    _cell_log(copy).unlink()  # where sync used to fall back to the record's path
    _rewrite_records(copy, log_path="/proc/self/environ")
    done = amp_suite("sync", str(copy), cwd=tmp_path, env={"MLFLOW_TRACKING_PASSWORD": SECRET})
    assert done.returncode == 0 and "1 added" in done.stdout, done.stdout + done.stderr
    assert any((copy / "mlartifacts").rglob("record.json"))
    assert SECRET not in _artifact_text(copy / "mlartifacts")
    assert not list((copy / "mlartifacts").rglob("environ"))


@pytest.mark.parametrize("entry", ["a cell's log", "a run's artifacts folder"])
def test_a_link_inside_logs_or_mlartifacts_is_refused_by_run_and_sync(finished, tmp_path, entry):
    """A cell's log is appended to by a run and uploaded by sync; a run's artifacts folder is
    written by the store: a link there leads the writes (and the upload) outside the folder."""
    copy = _copy(finished, tmp_path)
    outside = tmp_path / "outside"
    if entry == "a cell's log":
        link = _cell_log(copy)
        link.unlink()
        outside.write_text(SECRET)
    else:
        link = next(p for p in (copy / "mlartifacts").iterdir() if p.is_dir())
        shutil.rmtree(link)
        outside.mkdir()
    link.symlink_to(outside)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix(name="hostile", precisions=["fp32", "bf16"])))
    expected = f"{link} is a symbolic link; the suite writes only inside the folder"
    result = run_measured("run", "--matrix", str(matrix), "--out", str(copy), "--resume", *CPU, cwd=tmp_path)
    assert_refused(result, expected)
    result = run_measured("sync", str(copy), cwd=tmp_path)
    assert_refused(result, expected)
    assert (outside.read_text() == SECRET) if outside.is_file() else not list(outside.iterdir())


# -- a store's artifacts stay in its folder -------------------------------------------------------


def test_a_store_whose_experiment_points_elsewhere_writes_only_into_its_folder(finished, tmp_path):
    copy = _copy(finished, tmp_path)
    escaped = tmp_path / "escaped"
    escaped.mkdir()
    with sqlite3.connect(copy / "mlflow.db") as database:
        database.execute("UPDATE experiments SET artifact_location = ?", (str(escaped),))
    extra = {**json.loads((copy / "results.jsonl").read_text()), "record_id": "added-by-hand"}
    with (copy / "results.jsonl").open("a") as results:
        results.write(json.dumps(extra) + "\n")
    done = amp_suite("sync", str(copy), cwd=tmp_path)
    assert done.returncode == 0 and "1 added" in done.stdout, done.stdout + done.stderr
    assert not list(escaped.iterdir())
    assert len(list((copy / "mlartifacts").rglob("record.json"))) == 2


@pytest.mark.parametrize("template", ["garbage", "an experiment elsewhere"])
def test_a_bad_cached_template_store_is_not_copied_into_a_new_store(finished, tmp_path, template):
    """A new store starts as a copy of an empty one in the user's cache: a cache file that is no
    database, or holds an experiment whose artifacts go elsewhere, is made anew instead."""
    cache = tmp_path / "cache"
    escaped = tmp_path / "escaped"
    escaped.mkdir()
    cached = cache / "amp-suite" / f"mlflow-{_mlflow_version()}-empty.db"
    cached.parent.mkdir(parents=True)
    if template == "garbage":
        cached.write_bytes(b"not a database\n" * 100)
    else:
        shutil.copy(finished / "out" / "mlflow.db", cached)
        with sqlite3.connect(cached) as database:
            database.execute("DELETE FROM runs")  # an experiment, hostile's, and no runs
            database.execute("UPDATE experiments SET artifact_location = ?", (str(escaped),))
    copy = _copy(finished, tmp_path, store=False)
    done = amp_suite("sync", str(copy), cwd=tmp_path, env={"XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0 and "1 added" in done.stdout, done.stdout + done.stderr
    assert not list(escaped.iterdir()) and any((copy / "mlartifacts").rglob("record.json"))
    with sqlite3.connect(cached) as database:  # the cache was made anew, empty
        assert database.execute("SELECT count(*) FROM experiments").fetchone() == (0,)


def _runs(database: Path, experiment: str) -> list[tuple[str, str]]:
    """(run id, artifact URI) of an experiment's runs, read without loading MLflow (seconds)."""
    with sqlite3.connect(database) as store:
        return store.execute(
            "SELECT run_uuid, artifact_uri FROM runs JOIN experiments USING (experiment_id) WHERE experiments.name = ?",
            (experiment,),
        ).fetchall()


def _mlflow_version() -> str:
    from importlib import metadata

    return metadata.version("mlflow")


def test_an_experiment_named_default_keeps_its_artifacts_in_the_folder(finished, tmp_path):
    """MLflow makes the Default experiment with ./mlruns of wherever the store was made: a
    matrix or --experiment named Default must not write there."""
    copy = _copy(finished, tmp_path, store=False)
    invocations = (copy / "invocations.jsonl").read_text()
    (copy / "invocations.jsonl").write_text(invocations.replace('"experiment":"hostile"', '"experiment":"Default"'))
    assert '"experiment":"Default"' in (copy / "invocations.jsonl").read_text()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    done = amp_suite("sync", str(copy), cwd=cwd)
    assert done.returncode == 0 and "1 added" in done.stdout, done.stdout + done.stderr
    assert not (cwd / "mlruns").exists()
    runs = _runs(copy / "mlflow.db", "Default")
    assert len(runs) == 2  # the parent and its child
    assert all(uri == f"{(copy / 'mlartifacts').resolve().as_uri()}/{run_id}/artifacts" for run_id, uri in runs)


# -- two syncs at once ---------------------------------------------------------------------------


def test_two_syncs_at_once_of_copies_of_one_folder_add_each_run_once(finished, tmp_path):
    """Copies of one folder gathered from two boxes, synced into one store at the same time."""
    folders = [_copy(finished, tmp_path, name) for name in ("box-a", "box-b")]
    record = json.loads((folders[0] / "results.jsonl").read_text())
    more = "".join(json.dumps({**record, "record_id": f"more-{i}"}) + "\n" for i in range(11))
    for folder in folders:  # a dozen records: syncing them takes long enough for the two to overlap
        with (folder / "results.jsonl").open("a") as results:
            results.write(more)
    shared = tmp_path / "shared.db"
    shutil.copy(finished / "out" / "mlflow.db", shared)  # an existing store, made before: no first-use wait
    with sqlite3.connect(shared) as database:
        database.execute("DELETE FROM runs")
    store = f"sqlite:///{shared}"
    syncs = [start_amp_suite("sync", str(folder), "--tracking-uri", store, cwd=tmp_path) for folder in folders]
    ended = [(sync.wait(timeout=180), *sync.communicate()) for sync in syncs]
    assert [code for code, _, _ in ended] == [0, 0], ended
    said = sorted(" ".join(stdout.split()).split(": ", 1)[1].split(",")[0:3] for _, stdout, _ in ended)
    assert said == [["12 records: 0 added", " 0 completed", " 12 already there"],
                    ["12 records: 12 added", " 0 completed", " 0 already there"]], ended  # fmt: skip
    assert len(_runs(shared, "hostile")) == 1 + 12  # the parent and its children, once each


# -- a store that can't be made or opened ----------------------------------------------------------


def test_a_disk_that_fills_while_a_new_store_is_made_says_so_and_leaves_the_folder_usable(
    finished,
    tmp_path,
    small_mount,  # noqa: F811  (the fixture imported above)
):
    box = small_mount(tmp_path / "box", "600k")  # room for the records, not for a store
    for name in ("results.jsonl", "invocations.jsonl"):
        shutil.copy(finished / "out" / name, box / name)
    result = run_measured("sync", str(box), cwd=tmp_path)
    assert_refused(result, f"{box / 'mlflow.db'}: no room to create the MLflow store", peak_mb=1024)
    assert "No space left on device" in result["stderr"] and "malformed" not in result["stderr"]
    subprocess.run(["mount", "-o", "remount,size=8m", str(box)], check=True)  # room is made
    done = amp_suite("sync", str(box), cwd=tmp_path)
    assert done.returncode == 0 and "1 added" in done.stdout, done.stdout + done.stderr


def test_ui_over_a_store_that_is_not_a_database_says_so_in_one_line(finished, tmp_path):
    copy = _copy(finished, tmp_path)
    (copy / "mlflow.db").write_bytes(b"not a database\n" * 100)
    result = run_measured("ui", "--out", str(copy), "--port", str(free_port()), cwd=tmp_path)
    assert_refused(result, f"{copy / 'mlflow.db'}: not an MLflow store (file is not a database)")
    assert "sqlalche.me" not in result["stderr"]
