"""One conclusion per run (issue 54): `amp-suite run` works out the summary and the answers once, as
its matrix ends, and hands them to the terminal, the MLflow parent and the report, which show the
same answer. The calls are counted in the CLI's own process, as a user starts it, by a profile hook
on the two functions' code (a cell runs in a process of its own and calls neither)."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from conftest import REPO, cli_env, embedded, runs_in, tiny_matrix

COUNTED_RUN = """
import atexit, collections, json, os, sys, threading
from amp_suite.analysis import answer, summary

counted = {summary.summarize.__code__: "summarize", answer.answers.__code__: "answers"}
calls = collections.Counter()

def count(frame, event, arg):
    if event == "call" and frame.f_code in counted:
        calls[counted[frame.f_code]] += 1

atexit.register(lambda: open(os.environ["CALLS_OUT"], "w").write(json.dumps(calls)))
sys.setprofile(count)
threading.setprofile(count)
from amp_suite.__main__ import main
sys.argv = ["amp-suite", *sys.argv[1:]]
main()
"""


def test_a_run_works_out_its_summary_and_answers_once_and_every_surface_shows_that_answer(tmp_path):
    matrix, out, calls = tmp_path / "tiny.yaml", tmp_path / "out", tmp_path / "calls.json"
    matrix.write_text(yaml.safe_dump(tiny_matrix(precisions=["fp32", "bf16"])))
    command = [sys.executable, "-c", COUNTED_RUN, "run", "--matrix", str(matrix), "--out", str(out)]
    done = subprocess.run(command, cwd=tmp_path, env=cli_env({"CALLS_OUT": str(calls), "PYTHONPATH": str(REPO)}),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(calls.read_text()) == {"summarize": 1, "answers": 1}

    (answer,) = json.loads((out / "report" / "report.json").read_text())["answer"]
    said = " ".join(done.stdout.split())
    assert f"mlp (batch 8, eager): {answer['sentence']}" in said, (answer["sentence"], said)
    (parent,), _ = runs_in(embedded(out), "tiny")
    assert f"**mlp** (batch 8, eager): {answer['sentence']}" in parent.data.tags["mlflow.note.content"]
