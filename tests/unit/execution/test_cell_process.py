"""The child sets the visible-devices variable its parent named, the backend's of the cell's device
(issue 54.3), and none where the device has none."""

from __future__ import annotations

import os
from dataclasses import asdict

import pytest

from amp_suite.execution.cell_process import _place
from amp_suite.execution.worker import Placement
from amp_suite.hardware.backends import backend_named

VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


@pytest.fixture(autouse=True)
def no_variable_set(monkeypatch):
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)


@pytest.mark.parametrize("device_type", ["cuda", "rocm"])
def test_a_gpu_cells_devices_are_named_in_its_backends_variable(device_type):
    variable = backend_named(device_type).visible_devices
    _place(asdict(Placement("3", None, variable)))
    assert os.environ[variable] == "3"
    assert [name for name in VARIABLES if name in os.environ] == [variable]


def test_a_cpu_cell_sets_no_visible_devices_variable():
    _place(asdict(Placement("3", None, backend_named("cpu").visible_devices)))
    assert not any(name in os.environ for name in VARIABLES)
