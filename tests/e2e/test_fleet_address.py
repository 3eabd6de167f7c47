"""`amp-suite run --ray ADDRESS` where no Ray cluster answers: refused in seconds, in one line. It
needs no cluster, and measures nothing: unlike tests/e2e/test_fleet.py, it runs beside the others."""

from __future__ import annotations

import time

import pytest
import yaml
from conftest import amp_suite, free_port, tiny_matrix

pytest.importorskip("ray")


@pytest.mark.parametrize("address", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_no_cluster_at_the_address_is_a_one_line_error_in_seconds(tmp_path, address):
    address = address.format(port=free_port())  # nothing listens there
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(tiny_matrix()))
    clock = time.monotonic()
    done = amp_suite(
        "run", "--matrix", str(matrix), "--out", str(tmp_path / "out"), "--device", "cpu", "--ray", address,
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--ray {address}: no Ray cluster answers" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert time.monotonic() - clock < 30  # Ray's own retries would take minutes
    assert not (tmp_path / "out").exists()
