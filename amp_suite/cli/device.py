"""`amp-suite doctor` and `amp-suite inspect`: what this device can do, and what autocast does on it."""

from __future__ import annotations

from typing import Annotated

import typer

from amp_suite.cli.common import (
    DeviceChoice,
    MatrixOption,
    app,
    console,
    default_matrix,
    fail,
    resolve_device,
    resolve_matrix,
    say,
)
from amp_suite.config import PRECISIONS, WORKLOADS, ConfigError, load_matrix
from amp_suite.config.problems import did_you_mean, not_among


@app.command()
def doctor(
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    device: Annotated[DeviceChoice, typer.Option(help="Which device to describe.")] = DeviceChoice.auto,
) -> None:
    """Describe this machine's precision support and recommend a precision mode."""
    import json

    import torch

    from amp_suite.hardware.doctor import diagnose

    try:
        resolved = resolve_device(device)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    report = diagnose(torch.device(resolved))
    report["cuda_available"] = torch.cuda.is_available()
    if json_output:
        console.print_json(json.dumps(report))
        return
    if not report["cuda_available"]:
        say("No CUDA GPU is visible to PyTorch; describing the CPU.")
    for line in doctor_lines(report):
        say(line)


# The doctor's keys (its --json keeps them) as a reader says them.
DOCTOR_LABELS = {
    "device": "device", "device_name": "name", "compute_capability": "compute capability",
    "tensor_cores": "tensor cores", "fast_bf16": "fast bf16", "fast_fp16": "fast fp16", "tf32_supported": "TF32",
    "tf32_matmul_setting": "TF32 in matmuls", "tf32_cudnn_setting": "TF32 in cuDNN convolutions",
    "recommended_precision": "recommended precision", "recommendation_reason": "because",
    "versions": "versions", "torch_built_for_cuda": "torch built for CUDA", "nvml": "GPU state (NVML)",
    "cuda_available": "CUDA GPU visible",
}  # fmt: skip
# PyTorch's fp32_precision settings besides TF32's own (shown as "on"): "none" is not set at this
# level, where the backend's default applies.
TF32_SETTINGS = {"ieee": "off (ieee)", "none": "not set (PyTorch's default)"}
TF32_SETTING_KEYS = ("tf32_matmul_setting", "tf32_cudnn_setting")


def doctor_lines(report: dict) -> list[str]:
    """The doctor's report in words, a line a reading. Where the device has no TF32, its settings
    mean nothing: one line says so instead of two settings beside "TF32: no"."""
    lines = []
    for key, value in report.items():
        if key in TF32_SETTING_KEYS and not report.get("tf32_supported"):
            continue
        if key == "tf32_supported" and not value:
            value = "not on this device (the TF32 settings have no effect here)"
        elif key in TF32_SETTING_KEYS:
            value = TF32_SETTINGS.get(value, f"on ({value})")
        lines.append(f"{DOCTOR_LABELS.get(key, key.replace('_', ' ')):>28}: {_reading(value)}")
    return lines


def _reading(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{DOCTOR_LABELS.get(k, k.replace('_', ' '))} {_reading(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "not known"}[value]
    return str(value)


@app.command()
def inspect(
    workload: Annotated[str, typer.Option(help=f"Workload name in the matrix ({', '.join(WORKLOADS)}, or its label).")],
    precision: Annotated[str, typer.Option(help=f"Precision mode: {', '.join(PRECISIONS)}.")],
    matrix: MatrixOption = None,
    device: Annotated[DeviceChoice, typer.Option(help="Where to run the step.")] = DeviceChoice.auto,
    json_output: Annotated[bool, typer.Option("--json", help="Print the audit as JSON.")] = False,
) -> None:
    """Run one training step and show, per aten op, the dtypes autocast actually used."""
    import json

    from amp_suite.cli.display import print_audit
    from amp_suite.config import CellSpec
    from amp_suite.execution.batch_search import START as SMALL_BATCH

    try:  # a matrix given is checked before torch loads (to look for a GPU): bad input costs no import
        if precision not in PRECISIONS:
            hint = did_you_mean(precision, PRECISIONS)
            raise ConfigError(f"--precision: unknown {precision[:40]!r}{hint} (choose from {', '.join(PRECISIONS)})")
        given = load_matrix(resolve_matrix(matrix)) if matrix is not None else None
        resolved = resolve_device(device)
        loaded = given or load_matrix(default_matrix(resolved))
        names = [w.name for w in loaded.workloads]
        if workload not in names:
            why = not_among(workload, "workload", names, WORKLOADS)
            raise ConfigError(f"--workload: {why} (this matrix runs {', '.join(names)})")
        chosen = loaded.select([workload], None)
        if chosen.workloads[0].kernel_benchmark:
            raise ConfigError(f"--workload: {workload} is a kernel benchmark, with no training step to audit")
        from amp_suite.cli.preflight import check_workloads

        check_workloads(chosen)  # the user's entry in a child first, under its limit, as `run` checks it
    except ConfigError as exc:
        raise fail(str(exc)) from None
    config = chosen.workloads[0]
    batch = next(iter(config.fixed_batch_sizes), SMALL_BATCH)  # one step's dtypes do not depend on it
    spec = CellSpec(
        matrix=chosen.name, workload=config, precision=precision, batch_size=batch, seed=chosen.seed,
        steps=1, warmup_steps=1, max_grad_norm=chosen.max_grad_norm, device=resolved, force=True,
    )  # fmt: skip
    from amp_suite.cell.run import audit_cell  # torch, in this process: the step runs here

    audit = {"workload": config.name, "device": resolved, **audit_cell(spec)}
    if json_output:
        console.print_json(json.dumps(audit))
    else:
        print_audit(console, audit)
