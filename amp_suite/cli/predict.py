"""`amp-suite predict`: each mode's estimated speedup on GPUs the suite has not run on, behind a good
host and a slow one, beside what was published for them; or, given a run's records, on the GPU and
behind the host they ran on (its measured cost per kernel, or one given), beside what they measured.
What is estimated is amp_suite.report.predict_plan's; this command takes the options and prints, in
the tables of amp_suite.cli.predict_tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from amp_suite.analysis.outcome import ExitCode
from amp_suite.cli.common import MatrixOption, app, fail, resolve_matrix, say, source
from amp_suite.cli.predict_cells import entry_option
from amp_suite.cli.predict_tables import (
    print_calibrations,
    print_estimates,
    print_float8_benchmark,
    print_measured,
    say_host_bound,
    say_host_bound_range,
    say_windows_set_aside,
)
from amp_suite.config import ConfigError, load_matrix
from amp_suite.files import write_whole
from amp_suite.hardware.peaks import estimated_gpus, gpu_spec
from amp_suite.paths import is_folder
from amp_suite.records.results import utc_now
from amp_suite.records.rundir import RunDirectory
from amp_suite.report import predict_plan as plan
from amp_suite.report.cell_profiles import Profiles
from amp_suite.report.prediction import Estimated, PredictionFile
from amp_suite.report.references import load_references
from amp_suite.text import plain

DEFAULT_MATRIX = Path("nvidia-resnet50")  # the matrix whose published speedups the estimate is held against
MAX_LAUNCH_US = 10_000.0
PEAK_TABLE = "amp_suite/references/peaks/gpu-peaks.yaml"  # where a user reads the hosts' figures and sources


@app.command()
def predict(
    gpu: Annotated[
        Optional[list[str]],
        typer.Option(
            help="A GPU of the peak table as torch names it (A100-SXM4-80GB); repeat for several. "
            "Default: this machine's GPU generation, where it has a GPU, and the GPUs of the published "
            "figures the matrix meets (--all: every GPU the table has a memory bandwidth for)."
        ),
    ] = None,  # fmt: skip
    all_gpus: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every GPU the peak table has a memory bandwidth for, and torchao's float8 figures"
            " (shown by default only where the matrix has fp8).",
        ),
    ] = False,
    matrix: MatrixOption = None,
    results: Annotated[
        Optional[str],
        typer.Option(
            parser=source,
            help="A run folder or results.jsonl: estimate its cells on the GPU they ran on, beside the "
            "speedups they measured (and write prediction.json in a run folder, for its report).",
            show_default=False,
        ),
    ] = None,
    launch_us: Annotated[
        Optional[float],
        typer.Option(
            parser=host_microseconds,
            help="With --results: the host's cost per kernel in µs, for every cell (it wins over the records' "
            "own measurement, a bare op's floor). Default: the records' own; the peak table's where they have none.",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        Optional[list[str]],
        typer.Option(
            parser=entry_option,
            metavar="ENTRY",
            help="With --results: profile the cells of your own model whose records name this entry"
            " (module:function or file.py:function, as `amp-suite run --model` takes it): it runs here, as"
            " a script would. Repeat for several. Without it, such cells are left out: a record never"
            " says what code to run.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Estimate each mode's speedup on GPUs you may not have, from a roofline of every cell's training
    step, op by op, profiled on this CPU, behind a good host and a slow one; beside the published
    speedups for those GPUs, with the error."""
    try:
        if results is not None:
            if gpu or matrix is not None:
                raise ConfigError("--results estimates its records' cells on their GPU: leave out --gpu and --matrix")
            if all_gpus:
                raise ConfigError("--results estimates its records' cells on their GPU: leave out --all")
            _against_measured(results, launch_us, model or [])
            return
        if model:
            raise ConfigError("--model names the entry of --results' own cells; a matrix names its own")
        if launch_us is not None:
            raise ConfigError("--launch-us sets the host of --results' records; --gpu shows a good and a slow host")
        if gpu and all_gpus:
            raise ConfigError("--all estimates every GPU of the peak table: leave out --gpu")
        loaded = load_matrix(resolve_matrix(matrix if matrix is not None else DEFAULT_MATRIX))
        asked = plan.gpu_specs(gpu) if gpu else None
    except ConfigError as exc:
        raise fail(str(exc)) from None
    _against_published(loaded, asked, all_gpus)


def host_microseconds(value: str) -> float:
    """--launch-us: a host's cost per kernel, above 0 and at most 10 ms (a host that slow runs nothing)."""
    try:
        figure = float(value)
    except ValueError:
        raise typer.BadParameter(f"{value[:40]!r} is not a number of microseconds") from None
    if not 0 < figure <= MAX_LAUNCH_US:  # NaN fails this too
        raise typer.BadParameter(f"{value[:40]!r}: give microseconds above 0 and at most {MAX_LAUNCH_US:g}")
    return figure


def _against_published(loaded, asked: list[plan.Gpu] | None, every: bool) -> None:
    chosen = plan.matrix_cells(loaded)
    _say_left_out("", chosen.left_out)
    if not chosen.cells:
        raise fail(f"matrix {loaded.name}: no cell a roofline can estimate (above: why each mode is left out)")
    references = load_references(None)
    gpus = asked or _default_gpus(chosen.cells, references, plan.fp8_in_question(loaded), every)
    good, slow = plan.hosts()
    say(f"hosts: the columns at {slow.launch_us:g} µs are behind {slow.name} ({_kind(slow)}), the others behind "
        f"{good.name}, {good.launch_us:g} µs a kernel ({_kind(good)}); sources: {PEAK_TABLE}")  # fmt: skip
    say(plan.profiling_words(loaded.name, chosen.cells))
    result = plan.against_published(chosen.cells, gpus, Profiles(), references)
    for estimated in result.gpus:
        _print_gpu(estimated, result.hosts)
    count, error = plan.mean_error(result.calibrations)
    if error is not None:
        say(f"error on {count} published speedup(s): mean |estimated / published - 1| = {error:.0%}")
    own = plan.stated_error_line([spec.workload for spec in chosen.cells], references, measured=False)
    if own:
        say(own)
    if every or plan.fp8_in_question(loaded):
        _print_float8(plan.float8_benchmark(gpus, references, say))


def _default_gpus(cells: list, references: list, fp8: bool, every: bool) -> list[plan.Gpu]:
    """Every GPU of the peak table with --all; else this machine's generation and the published
    anchors (predict_plan.default_gpus), and a line naming the rest."""
    if every:
        return plan.gpu_specs(estimated_gpus())
    choice = plan.default_gpus(cells, references, fp8, plan.this_gpu())
    if choice.others:
        said = f"{', '.join(choice.anchors)} (published figures)"
        if choice.own_generation:
            said = f"{', '.join(choice.own_generation)} (this machine's generation) and {said}"
        say(f"GPUs: {said}; --all adds {len(choice.others)} more ({', '.join(choice.others)}), --gpu NAME any one")
    return plan.gpu_specs(choice.gpus)


def _print_gpu(estimated: plan.GpuEstimate, hosts: tuple) -> None:
    """One GPU's table behind both hosts, its host-bound cells, and the published speedups on it."""
    name = estimated.gpu.name
    _say_left_out(f"on {name}, ", estimated.left_out)
    if estimated.estimates:
        good, slow = hosts
        title = f"Estimated on {name}, from this CPU's op profile"  # columns without a host: behind the good one
        print_estimates(title, estimated.estimates, estimated.speedups,
                        (slow, estimated.slow, estimated.slow_speedups))  # fmt: skip
        say_host_bound_range(name, [(good, estimated.estimates), (slow, estimated.slow)])
    print_calibrations(name, estimated.calibrations)


def _print_float8(rows: list[plan.Float8Row]) -> None:
    if not rows:
        return
    print_float8_benchmark(rows)
    _, error = plan.mean_error([row.calibration for row in rows])
    say(f"error on {len(rows)} torchao float8 speedup(s): mean |estimated / published - 1| = {error:.0%}")


def _against_measured(results: str, launch_us: float | None, entries: list[str]) -> None:
    """The records' single-GPU cells (eager, or compiled in the default mode) estimated on the GPU
    each ran on, behind the host each ran on, beside the speedup over fp32 (or bf16) the records
    measured there. A cell of the user's own model only where they name its entry (`entries`)."""
    records = plan.records_of(results)
    summary = plan.summary_of(records)
    chosen, left_out = plan.chosen_cells(records, entries)
    profiles = Profiles(say)
    chosen = plan.profiled(chosen, profiles, left_out)
    for label, why in left_out.items():
        say(f"not estimated: {label}: {why}")
    if not chosen:
        why = "no single-GPU cell finished ok on CUDA that a roofline can estimate"
        raise ConfigError(f"--results {results[:200]}: {why}" + (" (above: why each is left out)" if left_out else ""))
    say_windows_set_aside(summary.values(), chosen)
    rows, unknown = [], set()
    for device_name in sorted({r.device_name or "" for r, _ in chosen.values()}):
        gpu = gpu_spec(device_name)
        if gpu is None:
            unknown.add(device_name or "an unnamed GPU")
            continue
        measured = plan.measured_on(gpu, plan.cells_on(chosen, device_name), summary, profiles, launch_us)
        _print_measured(measured)
        rows += measured.rows
    for name in sorted(unknown):
        say(f"{name}: not estimated, the peak table has no memory bandwidth for it (references/peaks/gpu-peaks.yaml)")
    count, error = plan.mean_error(rows)
    if error is not None:
        say(f"error on {count} measured speedup(s): mean |estimated / measured - 1| = {error:.0%}")
    own = plan.stated_error_line([spec.workload for _, spec in chosen.values()], load_references(None), measured=True)
    if own:
        say(own)
    if is_folder(Path(results)):
        _write_prediction(RunDirectory(Path(results)), rows)


def _print_measured(measured: plan.MeasuredOnGpu) -> None:
    name = measured.gpu.name
    for words, labels in measured.hosts.items():
        which = "" if len(measured.hosts) == 1 else f": {'; '.join(map(plain, labels))}"
        say(f"host on {name}: {words}{which}")
    for table in measured.tables:
        over = "" if table.baseline == plan.REFERENCE else f", over {table.baseline}"
        print_measured(f"Estimated against measured on {name}{over}", table.estimates, table.found,
                       table.measured_steps)  # fmt: skip
        say_host_bound(name, table.estimates)


def _write_prediction(run: RunDirectory, rows: list[Estimated]) -> None:
    """prediction.json in the run folder, whole, under the folder's lock: the report shows it."""
    RunDirectory.check_writable(run.path, "--results")
    text = PredictionFile(made_at=utc_now(), estimated=rows).model_dump_json(indent=1) + "\n"
    try:
        with run.locked("predict"):
            write_whole(run.prediction, text.encode())
    except OSError as exc:  # e.g. a full disk: the file is written whole or not at all
        raise fail(f"{run.prediction} not written: {exc.strerror or exc}", ExitCode.WRITE_FAILED) from None
    say(f"wrote {run.prediction} (amp-suite report {run.path} shows it)")


def _kind(host) -> str:
    """"assumed" or "measured": the word a host's source in the peak table opens with."""
    return host.source.partition(":")[0]


def _say_left_out(where: str, reasons: dict[str, str]) -> None:
    """One line: the modes left out, grouped by their reason."""
    by_reason: dict[str, list[str]] = {}
    for mode, why in reasons.items():
        by_reason.setdefault(why, []).append(mode)
    if by_reason:
        say(f"{where}not estimated: " + "; ".join(f"{', '.join(modes)} ({why})" for why, modes in by_reason.items()))
