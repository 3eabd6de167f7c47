"""`amp-suite predict`: each mode's estimated speedup on GPUs the suite has not run on, beside what
was published for them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from amp_suite.cli.common import MatrixOption, app, console, fail, resolve_matrix, say
from amp_suite.config import ConfigError, load_matrix
from amp_suite.config.problems import did_you_mean
from amp_suite.text import plain

DEFAULT_MATRIX = Path("nvidia-resnet50")  # the matrix whose published speedups the estimate is held against


@app.command()
def predict(
    gpu: Annotated[
        Optional[list[str]],
        typer.Option(help="A GPU of the peak table as torch names it (A100-SXM4-80GB); repeat for several. "
                     "Default: every GPU the table has a memory bandwidth for."),
    ] = None,  # fmt: skip
    matrix: MatrixOption = None,
) -> None:
    """Estimate each mode's speedup on GPUs you may not have, from a roofline of every cell's training
    step, op by op, profiled on this CPU; beside the published speedups for those GPUs, with the error."""
    from amp_suite.hardware.peaks import estimated_gpus, gpu_spec

    try:
        loaded = load_matrix(resolve_matrix(matrix if matrix is not None else DEFAULT_MATRIX))
        names = gpu or estimated_gpus()
        specs = []
        for name in names:
            spec = gpu_spec(name)
            if spec is None:
                hint = did_you_mean(name, estimated_gpus())
                raise ConfigError(f"--gpu: no memory bandwidth for {name[:60]!r} in the peak table{hint}")
            specs.append((name, spec))
    except ConfigError as exc:
        raise fail(str(exc)) from None

    from amp_suite.analysis.roofline import CellEstimate, estimate_step, speedup
    from amp_suite.cell.profile import profile_cell
    from amp_suite.config.precisions import MODE_BY_NAME, REFERENCE, TF32_BASELINE
    from amp_suite.report.prediction import calibrate, mean_absolute_error
    from amp_suite.report.references import load_references, published_speedups

    cells = {
        (spec.workload.name, spec.channels_last, spec.batch_size, spec.precision): spec
        for spec in loaded.cells("cpu", force=True)
        if isinstance(spec.batch_size, int) and spec.ddp is None and _estimated(MODE_BY_NAME[spec.precision])
    }
    profiles = {}  # (label, layout, batch, the mode whose ops it runs) -> its op profile
    for (label, layout, batch, precision), spec in cells.items():
        ran = precision if MODE_BY_NAME[precision].autocast else REFERENCE  # tf32 runs fp32's ops
        if (label, layout, batch, ran) not in profiles:
            say(f"profiling {label}{' (channels_last)' if layout else ''} at batch {batch} in {ran}")
            profiles[label, layout, batch, ran] = profile_cell(spec.model_copy(update={"precision": ran}))

    published = published_speedups(load_references(None))
    errors = []
    for name, spec in specs:
        estimates = []
        for (label, layout, batch, precision), cell in cells.items():
            ran = precision if MODE_BY_NAME[precision].autocast else REFERENCE
            costs = profiles[label, layout, batch, ran]
            config = {**cell.workload.model_dump(mode="json"), "compile": "off", "channels_last": layout}
            estimates.append(CellEstimate(label, config, batch, estimate_step(costs, spec, precision)))
        _print_estimates(spec.name, estimates, speedup, (REFERENCE, TF32_BASELINE))
        calibrations = calibrate(estimates, published, name)
        errors += calibrations
        _print_calibrations(spec.name, calibrations)
    error = mean_absolute_error(errors)
    if error is not None:
        measured = sum(c.error is not None for c in errors)
        say(f"error on {measured} published speedup(s): mean |estimated / published - 1| = {error:.0%}")


def _estimated(mode) -> bool:
    """The modes a roofline can estimate from a CPU's profile: not fp8 (torchao's float8 kernels), not a control."""
    return not mode.control and not mode.fp8_recipe


def _print_estimates(gpu: str, estimates, speedup, baselines: tuple[str, str]) -> None:
    from rich.table import Table

    table = Table(title=f"Estimated on {gpu} (a roofline of each step, profiled on this CPU)", title_justify="left")
    figures = ("batch", "step ms", *(f"vs {b}" for b in baselines))
    for header in ("workload", "batch", "mode", "step ms", *(f"vs {b}" for b in baselines), "bound", "dominant ops"):
        table.add_column(header, justify="right" if header in figures else "left")
    for estimate in estimates:
        cell = (estimate.label, estimate.config, estimate.batch)
        others = {e.precision: e for e in estimates if (e.label, e.config, e.batch) == cell}
        against = [f"{speedup(estimate.step, others[b].step):.2f}x" if b in others else "-" for b in baselines]
        dominant = ", ".join(f"{t.phase} {t.op}" for t in estimate.step.dominant(2))
        table.add_row(plain(estimate.label), str(estimate.batch), estimate.precision,
                      f"{estimate.step.seconds * 1e3:.3g}", *against, estimate.step.bound, plain(dominant))  # fmt: skip
    console.print(table)


def _print_calibrations(gpu: str, calibrations) -> None:
    lacking = [c for c in calibrations if c.estimated is None]
    if lacking:
        models = ", ".join(sorted({c.published.model for c in lacking}))
        say(f"{len(lacking)} published speedup(s) on {gpu} ({models}) need cells this matrix lacks"
            " (their matrices: nvidia-resnet50, transformer-references)")  # fmt: skip
    calibrations = [c for c in calibrations if c.estimated is not None]
    if not calibrations:
        return
    from rich.table import Table

    table = Table(title=f"Published speedups on {gpu}, and the estimate's", title_justify="left")
    for header in ("model", "speedup", "published", "estimated", "error"):
        table.add_column(header, justify="left" if header in ("model", "speedup") else "right")
    for c in calibrations:
        p = c.published
        table.add_row(plain(p.model), f"{p.precision} vs {p.baseline}", f"{p.value:.2f}x", f"{c.estimated:.2f}x",
                      f"{c.error:+.0%}")  # fmt: skip
    console.print(table)
