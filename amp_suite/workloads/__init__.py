"""Reference workloads, registered by name and imported on first use.

Each workload module imports its heavy dependency (torchvision, transformers) at the top, so a
matrix that runs only the MLP never pays for them.
"""

from __future__ import annotations

import importlib

from amp_suite.config import WorkloadConfig
from amp_suite.workloads.base import Workload

WORKLOAD_MODULES = {
    "resnet": "amp_suite.workloads.resnet",
    "transformer": "amp_suite.workloads.transformer",
    "mlp": "amp_suite.workloads.mlp",
}


def build_workload(config: WorkloadConfig, channels_last: bool = False) -> Workload:
    module = importlib.import_module(WORKLOAD_MODULES[config.workload])
    return module.WORKLOAD(config, channels_last)


__all__ = ["WORKLOAD_MODULES", "Workload", "build_workload"]
