"""Matrix files: validated once at the edge, frozen afterwards. No torch here.

A matrix file names workloads (with their sizes), precision modes, seeds and step counts.
`Matrix.cells()` expands it into one `CellSpec` per (workload, batch size, seed, precision),
ordered so that every precision of one workload configuration runs back to back. Every value
the schema accepts is one the suite can run: sizes are bounded, floats finite, names fit in
file names, and error messages never echo unbounded input.
"""

from amp_suite.config.base import (
    AUTO_BATCH,
    NOISY_SPREAD,
    PRECISIONS,
    WINDOWS,
    ConfigError,
    Device,
    Precision,
    Status,
)
from amp_suite.config.ddp import COMM_HOOKS, DdpCell, DdpConfig
from amp_suite.config.loading import describe_validation_error, load_matrix, read_matrix_text
from amp_suite.config.matrix import CellSpec, Expectation, Matrix, ParityConfig
from amp_suite.config.workloads import (
    WORKLOADS,
    DataConfig,
    MLPConfig,
    ResNetConfig,
    TargetConfig,
    TransformerConfig,
    WorkloadConfig,
)

__all__ = [
    "AUTO_BATCH", "COMM_HOOKS", "NOISY_SPREAD", "PRECISIONS", "WORKLOADS", "CellSpec", "ConfigError", "DataConfig",
    "DdpCell", "DdpConfig", "Device", "Expectation", "MLPConfig", "Matrix", "ParityConfig", "Precision",
    "ResNetConfig", "Status", "TargetConfig", "TransformerConfig", "WINDOWS", "WorkloadConfig",
    "describe_validation_error", "load_matrix", "read_matrix_text",
]  # fmt: skip
