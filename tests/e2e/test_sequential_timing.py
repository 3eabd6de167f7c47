"""Sequential timing through the CLI: a comparison timed round after round until the stopping rule
decides (or its budget ends) changes no accuracy figure. Parity's validation, the loss curve and time
to target's evaluations are the matrix's steps' under `stopping: fixed` and `sequential` alike."""

from __future__ import annotations

import pytest
import yaml
from conftest import amp_suite, read_records

pytestmark = pytest.mark.slow
ACCURACY = ("val_metric", "val_metrics", "val_loss", "final_loss", "loss_curve", "steps_to_target", "target")


def matrix(stopping: dict) -> dict:
    return {
        "name": "timing", "seed": 0, "warmup_steps": 2, "steps": 24, "precisions": ["fp32", "bf16"],
        "stopping": stopping,
        "workloads": [{"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": [8],
                       "samples": 64, "force": ["bf16"], "target": {"of_fp32": 0.9, "eval_every": 8}}],
    }  # fmt: skip


def test_accuracy_is_the_matrix_steps_whether_timing_stopped_at_the_schedule_or_rounds_after(tmp_path):
    found = {}
    # A 1 s budget ends the rounds after the schedule's 6 on this machine's ~20 ms windows only if
    # the rule has decided first: either way, some rounds may run past the schedule.
    for rule in ("fixed", "sequential"):
        (tmp_path / f"{rule}.yaml").write_text(yaml.safe_dump(matrix({"rule": rule, "budget": 3})))
        out = tmp_path / rule
        done = amp_suite("run", "--matrix", str(tmp_path / f"{rule}.yaml"), "--out", str(out), "--device", "cpu",
                         cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        # The answer says how long the comparison was timed, and why it stopped.
        assert ("timed on the fixed schedule: 6 rounds" if rule == "fixed" else "timed until ") in done.stdout
        found[rule] = {r["precision"]: r for r in read_records(out)}
    for precision in ("fp32", "bf16"):
        fixed, sequential = found["fixed"][precision], found["sequential"][precision]
        assert {k: fixed[k] for k in ACCURACY} == {k: sequential[k] for k in ACCURACY}, precision
        curve = [(p["step"], p["metric"]) for p in fixed["eval_curve"]]
        assert curve == [(p["step"], p["metric"]) for p in sequential["eval_curve"]]
        assert fixed["timing_stop"]["rule"] == "fixed" and fixed["timing_stop"]["rounds"] == 6
        stop = sequential["timing_stop"]
        assert stop["rule"] == "sequential" and 6 <= stop["rounds"] <= 18 and stop["stopped"] in ("decided", "budget")
        assert len(sequential["throughput_windows"]) == stop["rounds"]  # every round's window, timed
        assert len(fixed["loss_curve"]) == len(sequential["loss_curve"]) == 24
