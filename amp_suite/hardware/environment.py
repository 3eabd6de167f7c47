"""The environment block every record carries: what ran, on what, with which software."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

import amp_suite
from amp_suite.instruments.nvml import nvml_uuid
from amp_suite.records.machine import DeviceCaps

PACKAGES = ("torch", "torchvision", "transformers", "datasets", "mlflow")


def collect(device: torch.device, caps: DeviceCaps) -> dict[str, Any]:
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "suite_version": amp_suite.__version__,
        "git_commit": git_commit(),
        "device_name": caps.name,
        "compute_capability": caps.capability_str,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "driver": None,
        "torch_threads": torch.get_num_threads(),
        # Which GPUs the cell was given (amp-suite run --gpus), and the one it ran on.
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),  # how those indexes count GPUs
        "gpu_uuid": None,
    }
    env.update({name: package_version(name) for name in PACKAGES})
    if device.type == "cuda":
        env["cudnn"] = torch.backends.cudnn.version()
        env["driver"] = nvidia_driver_version()
        env["gpu_uuid"] = nvml_uuid(device)
    return env


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def git_commit() -> str | None:
    """The suite's commit when it runs from a checkout ("+dirty" with uncommitted changes)."""
    source = Path(amp_suite.__file__).resolve().parent.parent
    try:
        commit = _git(source, "rev-parse", "HEAD")
        dirty = _git(source, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def _git(cwd: Path, *args: str) -> str:
    # No optional locks: `git status` would otherwise take .git/index.lock to refresh the index,
    # and a cell stopped meanwhile (a signal) would leave that lock behind in the user's checkout.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=10)
    return done.stdout.strip()


def nvidia_driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None
