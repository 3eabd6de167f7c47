from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = REPO / "experiments"

# Nothing in the suite may wait on a model/dataset hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def tiny_matrix(**overrides) -> dict:
    """A matrix small enough to run in seconds on a CPU."""
    matrix = {
        "name": "tiny",
        "seed": 0,
        "warmup_steps": 2,
        "steps": 4,
        "precisions": ["fp32", "tf32", "fp16", "bf16"],
        "workloads": [
            {"workload": "mlp", "in_features": 16, "hidden": 32, "depth": 2, "batch_sizes": [8], "samples": 64},
        ],
    }
    matrix.update(overrides)
    return matrix


@pytest.fixture
def gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU; none is visible to PyTorch")
