from __future__ import annotations

import json

from typer.testing import CliRunner

from amp_suite.cli import app
from amp_suite.hardware.backends.cpu import _cpuinfo
from amp_suite.hardware.doctor import recommend
from amp_suite.records.machine import CPU_BF16_FLAGS, CPU_FP16_FLAGS, cpu_caps


def test_doctor_json_on_this_cpu_reports_what_the_cpu_has():
    done = CliRunner().invoke(app, ["doctor", "--json", "--device", "cpu"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    _, flags = _cpuinfo()
    assert report["device"] == "cpu" and report["compute_capability"] is None
    assert report["fast_bf16"] == bool(flags & CPU_BF16_FLAGS)
    assert report["fast_fp16"] == bool(flags & CPU_FP16_FLAGS)
    assert report["recommended_precision"] == recommend(cpu_caps("", flags)).precision
    assert report["versions"]["torch"]
    host = report["host_cost_per_kernel"]  # what predict weighs a step's launches with, and what it is here
    assert 0 < host["microseconds"] < 1000 and host["kernels_timed"] >= 2000 and "dispatch" in host["measured_as"]
