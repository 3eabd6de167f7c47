"""Reference workloads, imported on first use from the module their config names
(amp_suite.config.workloads.WORKLOAD_CONFIGS is the registry).

Each workload module imports its heavy dependency (torchvision, transformers) at the top, so a
matrix that runs only the MLP never pays for them.
"""

from __future__ import annotations

import importlib

from amp_suite.config import WorkloadConfig
from amp_suite.workloads.base import Workload


def build_workload(config: WorkloadConfig, channels_last: bool = False) -> Workload:
    return importlib.import_module(config.module).WORKLOAD(config, channels_last)


__all__ = ["Workload", "build_workload"]
