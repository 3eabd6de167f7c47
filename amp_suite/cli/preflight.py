"""What `amp-suite run` checks of the workloads it was not shipped with, before any cell: that each
model named from torchvision exists, and that each user entry imports, runs and returns an
amp_suite.UserWorkload (called in a child process: the user's code never runs in the process that
keeps the records). And the matrix `--model ENTRY` stands for."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from amp_suite.config import ConfigError, Matrix, describe_validation_error
from amp_suite.config.workloads import CustomConfig, TorchvisionConfig

# --model's matrix: every mode the article compares, one seed, short enough to answer in minutes.
MODEL_MATRIX = {
    "seed": 0, "repeats": 1, "warmup_steps": 10, "steps": 120, "precisions": ["fp32", "tf32", "fp16", "bf16"],
}  # fmt: skip
MODEL_BATCH_SIZE = 32
ENTRY_CHECK_TIMEOUT_S = 600  # building a large model on the CPU takes a while; a hang does not end the run


def model_matrix(entry: str) -> tuple[Matrix, str]:
    """The one-workload matrix `--model ENTRY` runs, and its text for the run's record. A file
    entry is named from the working directory."""
    workload = {"workload": "custom", "entry": entry, "batch_sizes": [MODEL_BATCH_SIZE]}
    try:
        name = CustomConfig.model_validate(workload).name
        data = {"name": name, **MODEL_MATRIX, "workloads": [workload]}
        matrix = Matrix.model_validate(data, context={"matrix_dir": Path.cwd()})
    except ValidationError as exc:
        raise ConfigError(f"--model {entry}: {describe_validation_error(exc)}") from None
    return matrix, yaml.safe_dump(matrix.model_dump(mode="json", exclude_unset=True), sort_keys=False)


def check_workloads(matrix: Matrix) -> None:
    """Every problem a cell would only meet later, as one ConfigError line (exit 2)."""
    check_torchvision_names(matrix)
    check_entries(matrix)


def check_torchvision_names(matrix: Matrix) -> None:
    names = [w.model for w in matrix.workloads if isinstance(w, TorchvisionConfig)]
    if not names:
        return
    import torchvision

    known = torchvision.models.list_models(module=torchvision.models)  # the classification models
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ConfigError(
                f"torchvision has no classification model {name!r}: {hint}"
                "(torchvision.models.list_models(module=torchvision.models) lists them)"
            )


def check_entries(matrix: Matrix) -> None:
    """Call each user entry once, with its args, in a child process; its one-line reason becomes
    a ConfigError (exit 2) before any cell runs."""
    seen: set[str] = set()
    for workload in matrix.workloads:
        if not isinstance(workload, CustomConfig):
            continue
        key = json.dumps([workload.entry, workload.args], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        command = [sys.executable, "-m", "amp_suite.workloads.custom", workload.entry, json.dumps(workload.args)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=ENTRY_CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"entry {workload.entry}: still running after {ENTRY_CHECK_TIMEOUT_S} s") from None
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            reason = lines[-1] if lines else f"exited {done.returncode}"
            raise ConfigError(reason[:500])
