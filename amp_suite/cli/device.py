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
from amp_suite.config import PRECISIONS, ConfigError, load_matrix


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
    for key, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        say(f"{key:>24}: {value}")


@app.command()
def inspect(
    workload: Annotated[str, typer.Option(help="Workload name in the matrix (resnet, transformer, mlp).")],
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
            raise ConfigError(f"--precision: unknown {precision[:40]!r}; choose from {list(PRECISIONS)}")
        given = load_matrix(resolve_matrix(matrix)) if matrix is not None else None
        resolved = resolve_device(device)
        loaded = given or load_matrix(default_matrix(resolved))
        names = [w.name for w in loaded.workloads]
        if workload not in names:
            raise ConfigError(f"--workload: unknown {workload[:40]!r}; this matrix has {names}")
        chosen = loaded.select([workload], None)
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
