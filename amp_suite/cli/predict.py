"""`amp-suite predict`: each mode's estimated speedup on GPUs the suite has not run on, beside what
was published for them; or, given a run's records, on the GPU they ran on, beside what they measured."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Optional

import typer

from amp_suite.analysis.words import times
from amp_suite.cli.common import MatrixOption, app, console, fail, resolve_matrix, say, source
from amp_suite.config import ConfigError, load_matrix
from amp_suite.config.problems import did_you_mean
from amp_suite.paths import is_folder
from amp_suite.records.rundir import RunDirectory
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
    results: Annotated[
        Optional[str],
        typer.Option(
            parser=source,
            help="A run folder or results.jsonl: estimate its cells on the GPU they ran on, beside the "
            "speedups they measured (and write prediction.json in a run folder, for its report).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Estimate each mode's speedup on GPUs you may not have, from a roofline of every cell's training
    step, op by op, profiled on this CPU; beside the published speedups for those GPUs, with the error."""
    try:
        if results is not None:
            if gpu or matrix is not None:
                raise ConfigError("--results estimates its records' cells on their GPU: leave out --gpu and --matrix")
            _against_measured(results)
            return
        loaded = load_matrix(resolve_matrix(matrix if matrix is not None else DEFAULT_MATRIX))
        gpus = _gpus(gpu)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    _against_published(loaded, gpus)


def _gpus(names: list[str] | None) -> list:
    from amp_suite.hardware.peaks import estimated_gpus, gpu_spec

    specs = []
    for name in names or estimated_gpus():
        spec = gpu_spec(name)
        if spec is None:
            hint = did_you_mean(name, estimated_gpus())
            raise ConfigError(f"--gpu: no memory bandwidth for {name[:60]!r} in the peak table{hint}")
        specs.append((name, spec))
    return specs


class _Profiles:
    """Each cell's op profile, made once per model, layout, batch and the mode whose ops it runs
    (tf32 runs fp32's ops: only the math under them differs)."""

    def __init__(self) -> None:
        self.made: dict[tuple, list] = {}

    def estimate(self, spec, label: str, config: dict, gpu):
        from amp_suite.analysis.roofline import CellEstimate, estimate_step

        costs = self.of(spec).costs(compiled=spec.compile != "off")
        return CellEstimate(label, config, spec.batch_size, estimate_step(costs, gpu, spec.precision))

    def of(self, spec):
        from amp_suite.cell.profile import profile_cell
        from amp_suite.config.precisions import MODE_BY_NAME, REFERENCE

        ran = spec.precision if MODE_BY_NAME[spec.precision].autocast else REFERENCE
        key = (spec.workload.model_dump_json(), spec.channels_last, spec.batch_size, ran)
        if key not in self.made:
            layout = " (channels_last)" if spec.channels_last else ""
            say(f"profiling {spec.matrix}: {spec.workload.name}{layout} at batch {spec.batch_size} in {ran}")
            self.made[key] = profile_cell(spec.model_copy(update={"precision": ran}))
        return self.made[key]


def _against_published(loaded, gpus: list) -> None:
    from amp_suite.config.precisions import BF16_BASELINE, FP8_MODES, REFERENCE, TF32_BASELINE
    from amp_suite.report.prediction import calibrate, estimated_speedups, mean_absolute_error
    from amp_suite.report.references import load_references, published_speedups

    single = [  # one seed: the estimate is the same for every one
        spec for spec in loaded.cells("cpu", force=True)
        if spec.seed == loaded.seed and isinstance(spec.batch_size, int) and spec.ddp is None
    ]  # fmt: skip
    left_out = {(spec.precision, spec.compile): _not_estimated(spec.precision, spec.compile) for spec in single}
    cells = [spec for spec in single if left_out[spec.precision, spec.compile] is None]
    _say_left_out("", {f"{mode} {'eager' if compile == 'off' else f'compiled ({compile})'}": why
                        for (mode, compile), why in left_out.items() if why})  # fmt: skip
    if not cells:
        raise fail(f"matrix {loaded.name}: no cell a roofline can estimate (above: why each mode is left out)")
    configs = [_config_of(spec) for spec in cells]
    profiles = _Profiles()
    references = load_references(None)
    published = published_speedups(references)
    errors = []
    for name, gpu in gpus:
        runs = {spec.precision: _runs_on(spec.precision, gpu) for spec in cells}
        _say_left_out(f"on {gpu.name}, ", {mode: why for mode, why in runs.items() if why})
        here = [(spec, config) for spec, config in zip(cells, configs, strict=True) if runs[spec.precision] is None]
        estimates = [profiles.estimate(s, _compiled(s.workload.name, s.compile), c, gpu) for s, c in here]
        fp8 = any(spec.precision in FP8_MODES for spec, _ in here)  # then also beside what it would replace
        baselines = (REFERENCE, TF32_BASELINE, *([BF16_BASELINE] if fp8 else []))
        speedups = {b: estimated_speedups(estimates, b) for b in baselines}
        title = f"Estimated on {gpu.name} (a roofline of each step, profiled on this CPU)"
        _print_estimates(title, estimates, speedups)
        calibrations = calibrate(estimates, published, name)
        errors += calibrations
        _print_calibrations(gpu.name, calibrations)
    error = mean_absolute_error(errors)
    if error is not None:
        measured = sum(c.error is not None for c in errors)
        say(f"error on {measured} published speedup(s): mean |estimated / published - 1| = {error:.0%}")
    _against_float8_benchmark(gpus, references)


def _against_float8_benchmark(gpus: list, references: list) -> None:
    """torchao's published float8 single-linear speedups on the GPUs asked for, beside the estimate
    of the same program (amp_suite.cell.float8_benchmark), compiled, on the publisher's GPU."""
    from dataclasses import replace

    from amp_suite.analysis.roofline import estimate_step, speedup
    from amp_suite.cell.float8_benchmark import BENCHMARK, BF16, FP8, profile_benchmark
    from amp_suite.hardware.peaks import gpu_spec
    from amp_suite.report.prediction import Calibration, mean_absolute_error
    from amp_suite.report.references import stated_speedup

    asked = {gpu.name for _, gpu in gpus}
    rows = []
    for reference in (r for r in references if r.config.get("benchmark") == BENCHMARK):
        gpu = gpu_spec(reference.gpu)
        if gpu is None or gpu.name not in asked:
            continue
        # Its time is the GPU's kernels' alone, so no launch cost; on the publisher's GPU's memory.
        gpu = replace(gpu, launch_us=0.0, memory_gbps=reference.gpu_memory_gbps or gpu.memory_gbps)
        shape = tuple(reference.config[size] for size in ("M", "K", "N"))
        say(f"profiling torchao's float8 benchmark at M, K, N = {', '.join(map(str, shape))} in {BF16} and {FP8}")
        steps = {mode: estimate_step(profile_benchmark(*shape, mode).costs(compiled=True), gpu, mode)
                 for mode in (BF16, FP8)}  # fmt: skip
        rows.append((shape, gpu, steps, Calibration(stated_speedup(reference), speedup(steps[FP8], steps[BF16]))))
    if not rows:
        return
    _print_float8_benchmark(rows)
    error = mean_absolute_error([calibration for *_, calibration in rows])
    say(f"error on {len(rows)} torchao float8 speedup(s): mean |estimated / published - 1| = {error:.0%}")


def _against_measured(results: str) -> None:
    """The records' single-GPU cells (eager, or compiled in the default mode) estimated on the GPU
    each ran on, beside the speedup over fp32 (or bf16) the records measured there."""
    from amp_suite.analysis.summary import group_key, summarize
    from amp_suite.config.precisions import BF16_BASELINE, REFERENCE
    from amp_suite.hardware.peaks import gpu_spec
    from amp_suite.report.prediction import estimated_speedups, mean_absolute_error
    from amp_suite.report.sources import check_sources, gather

    if not Path(results).exists():
        raise ConfigError(f"--results {results[:200]}: no such run folder or results.jsonl")
    check_sources([results], None)
    records = gather([results], None).records
    if not records:
        raise ConfigError(f"--results {results[:200]}: no records")
    summary = {(row.machine, row.setup, row.precision): row for row in summarize(records)}
    chosen = {}  # (machine, setup, precision) -> a record of that cell (its first seed), and the cell it measured
    for record in records:
        if record.status == "ok" and record.device == "cuda" and not record.world_size:
            estimable = not _not_estimated(record.precision, record.compile) and isinstance(record.batch_size, int)
            measured = estimable and _spec_of(record)
            if measured:
                chosen.setdefault(group_key(record), (record, measured))
    if not chosen:
        why = "no single-GPU cell finished ok on CUDA that a roofline can estimate"
        raise ConfigError(f"--results {results[:200]}: {why}")
    profiles, rows, unknown = _Profiles(), [], set()
    for device_name in sorted({r.device_name or "" for r, _ in chosen.values()}):
        gpu = gpu_spec(device_name)
        if gpu is None:
            unknown.add(device_name or "an unnamed GPU")
            continue
        by_baseline: dict[str, tuple[list, list]] = {}  # baseline -> the cells' estimates, and their speedups
        for (machine, setup), cell in _cells_on(chosen, device_name).items():
            # Over fp32, as every table has it; a cell without fp32 (fp8 against the bf16 it would replace) over bf16.
            baseline = REFERENCE if REFERENCE in cell else BF16_BASELINE
            estimates, found = by_baseline.setdefault(baseline, ([], []))
            estimated = [profiles.estimate(spec, _label(r), {"setup": setup}, gpu) for r, spec in cell.values()]
            estimates += estimated
            for row in estimated_speedups(estimated, baseline):  # batch_sizes auto: a mode at another batch has none
                found.append(row and _with_measured(row, summary.get((machine, setup, row.precision))))
        for baseline, (estimates, found) in by_baseline.items():
            rows += [row for row in found if row is not None]
            title = f"Estimated against measured on {gpu.name}{'' if baseline == REFERENCE else f', over {baseline}'}"
            _print_estimates(title, estimates, {baseline: found}, measured=True)
    for name in sorted(unknown):
        say(f"{name}: not estimated, the peak table has no memory bandwidth for it (references/peaks/gpu-peaks.yaml)")
    error = mean_absolute_error(rows)
    if error is not None:
        count = sum(row.error is not None for row in rows)
        say(f"error on {count} measured speedup(s): mean |estimated / measured - 1| = {error:.0%}")
    if is_folder(Path(results)):
        _write_prediction(RunDirectory(Path(results)), rows)


def _write_prediction(run, rows: list) -> None:
    """prediction.json in the run folder, whole, under the folder's lock: the report shows it."""
    from amp_suite.analysis.outcome import ExitCode
    from amp_suite.files import write_whole
    from amp_suite.records.results import utc_now
    from amp_suite.report.prediction import PredictionFile

    RunDirectory.check_writable(run.path, "--results")
    text = PredictionFile(made_at=utc_now(), estimated=rows).model_dump_json(indent=1) + "\n"
    try:
        with run.locked("predict"):
            write_whole(run.prediction, text.encode())
    except OSError as exc:  # e.g. a full disk: the file is written whole or not at all
        raise fail(f"{run.prediction} not written: {exc.strerror or exc}", ExitCode.WRITE_FAILED) from None
    say(f"wrote {run.prediction} (amp-suite report {run.path} shows it)")


def _with_measured(row, measured):
    """The estimate with what the records measured of the same cell (a summary row), where they did,
    over the same baseline."""
    ratio = measured.speedups.get(row.baseline) if measured is not None else None
    step = measured.step_time_ms if measured is not None else None
    return row.model_copy(update={"measured": ratio.value if ratio else None, "measured_step_ms": step})


def _label(record) -> str:
    """The workload as the records' own tables name it, with its matrix: one run folder can hold
    the same workload in several configurations, one a matrix."""
    return _compiled(f"{record.workload} ({record.matrix})" if record.matrix else record.workload, record.compile)


def _compiled(label: str, compile: str) -> str:
    """A compiled cell's label says so: a matrix can hold the same workload eager and compiled."""
    return label if compile == "off" else f"{label}, compiled"


def _spec_of(record):
    """The cell a record measured, at the batch it ran, to profile on this CPU; None where its config
    no longer validates (a record of another version of the suite: left out, as the report leaves it)."""
    from pydantic import ValidationError

    from amp_suite.config import CellSpec

    try:
        return CellSpec.model_validate({**record.config, "batch_size": record.batch_size, "device": "cpu"})
    except ValidationError:
        return None


def _cells_on(chosen: dict, device_name: str) -> dict:
    """The chosen (record, cell) pairs of one GPU, by cell (machine, setup), then mode."""
    from amp_suite.config.precisions import precision_order

    cells: dict = {}
    for (machine, setup, precision), (record, spec) in chosen.items():
        if record.device_name == device_name:
            cells.setdefault((machine, setup), {})[precision] = (record, spec)
    in_order = lambda mode: precision_order(mode[0])  # noqa: E731  (fp32 first, as every table has it)
    return {cell: dict(sorted(modes.items(), key=in_order)) for cell, modes in cells.items()}


def _not_estimated(precision: str, compile: str) -> str | None:
    """Why a roofline can't estimate a cell from a CPU's profile, or None: it estimates the
    article's modes and fp8's, eager or compiled in the default mode, where the mode runs so (fp8
    runs compiled only)."""
    from amp_suite.cell.precision import make_policy
    from amp_suite.config.precisions import ARTICLE_MODES, FP8_MODES

    if precision not in ARTICLE_MODES + FP8_MODES:
        return "a negative control, not a mode to train in"
    if compile not in ("off", "default"):
        return f"compile {compile}: CUDA graphs and autotuned kernels are beyond the model"
    return make_policy(precision, "cpu").unsupported_compile(compile)


def _runs_on(precision: str, gpu) -> str | None:
    """Why the mode does not run on the GPU (its compute capability), as a cell there would say; or None."""
    from amp_suite.cell.precision import make_policy
    from amp_suite.records.machine import cuda_caps

    return make_policy(precision, "cuda").unsupported_reason(cuda_caps(gpu.name, gpu.capability))


def _say_left_out(where: str, reasons: dict[str, str]) -> None:
    """One line per reason: the modes left out for it."""
    by_reason: dict[str, list[str]] = {}
    for mode, why in reasons.items():
        by_reason.setdefault(why, []).append(mode)
    for why, modes in by_reason.items():
        say(f"{where}not estimated: {', '.join(modes)} ({why})")


def _print_estimates(title: str, estimates, speedups: dict, measured: bool = False) -> None:
    """A row per estimate; `speedups`: per baseline, each estimate's Estimated (or None), in order."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    baselines = list(speedups)
    # Beside measurements, each figure says which it is: the step is the estimate's, as are the bound and ops.
    over = [f"estimated vs {b}" if measured else f"vs {b}" for b in baselines]
    headers = ["workload", "batch", "mode", "estimated step ms" if measured else "step ms",
               *([f"measured vs {baselines[0]}"] if measured else []), *over, *(["error"] if measured else []),
               "bound", "dominant ops"]  # fmt: skip
    for header in headers:
        table.add_column(header, justify="left" if header in ("workload", "mode", "bound", "dominant ops") else "right")
    for index, estimate in enumerate(estimates):
        found = [speedups[b][index] for b in baselines]
        against = [times(row.estimated if row else None) for row in found]
        first = found[0]
        extra = [times(first.measured if first else None)] if measured else []
        error = [f"{first.error:+.0%}" if first and first.error is not None else "-"] if measured else []
        dominant = ", ".join(estimate.step.dominant_names())
        table.add_row(plain(estimate.label), str(estimate.batch), estimate.precision,
                      f"{estimate.step.seconds * 1e3:.3g}", *extra, *against, *error, estimate.step.bound,
                      plain(dominant))  # fmt: skip
    console.print(table)


def _print_float8_benchmark(rows: list) -> None:
    from rich.table import Table

    first_gpu = rows[0][1]
    table = Table(title=f"torchao's float8 single linear on {first_gpu.name} ({first_gpu.memory_gbps:g} GB/s, as "
                  "published): fp8-tensorwise vs bf16, compiled, GPU kernel time", title_justify="left")  # fmt: skip
    texts = ("M, K, N", "fp8 bound", "fp8's dominant ops")
    for header in (*texts[:1], "published", "estimated", "error", "bf16 µs", "fp8 µs", *texts[1:]):
        table.add_column(header, justify="left" if header in texts else "right")
    for shape, _, steps, c in rows:
        bf16, fp8 = steps.values()
        table.add_row(", ".join(map(str, shape)), f"{c.published.value:.2f}x", f"{c.estimated:.2f}x", f"{c.error:+.0%}",
                      f"{bf16.seconds * 1e6:.4g}", f"{fp8.seconds * 1e6:.4g}", fp8.bound,
                      plain(", ".join(fp8.dominant_names())))  # fmt: skip
    console.print(table)


def _config_of(spec) -> dict:
    """A cell's configuration as published figures are matched by: its workload, compile and layout."""
    return {**spec.workload.model_dump(mode="json"), "compile": spec.compile, "channels_last": spec.channels_last}


def _shipped_matrices_with(figures) -> list[str]:
    """The shipped matrices with a cell of any of the published figures' configurations and batches."""
    from amp_suite.report.references import same_config

    wanted = [(figure.config, figure.config.get("batch_size")) for figure in figures]

    def has(cells: list) -> bool:
        return any(batch == want and same_config(config, figure) for config, batch in cells for figure, want in wanted)

    return [name for name, cells in _shipped_cells() if has(cells)]


@functools.cache
def _shipped_cells() -> tuple[tuple[str, list[tuple[dict, object]]], ...]:
    """Each shipped matrix's cells as (config, batch), read once however many GPUs ask."""
    from amp_suite.cli.common import EXPERIMENTS_DIR

    found = []
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        try:
            cells = load_matrix(path).cells("cpu", force=True)
        except ConfigError:  # one the suite can't load here (its own files elsewhere): not a suggestion
            continue
        found.append((path.stem, [(_config_of(spec), spec.batch_size) for spec in cells]))
    return tuple(found)


def _print_calibrations(gpu: str, calibrations) -> None:
    lacking = [c for c in calibrations if c.estimated is None]
    if lacking:
        models = ", ".join(sorted({c.published.model for c in lacking}))
        shipped = ", ".join(_shipped_matrices_with([c.published for c in lacking])) or "none shipped"
        say(f"{len(lacking)} published speedup(s) on {gpu} ({models}) need cells this matrix lacks"
            f" (matrices that have them: {shipped})")  # fmt: skip
    calibrations = [c for c in calibrations if c.estimated is not None]
    if not calibrations:
        return
    from rich.table import Table

    table = Table(title=f"Published speedups on {gpu}, and the estimate's", title_justify="left")
    for header in ("model", "speedup", "published", "estimated", "error"):
        table.add_column(header, justify="left" if header in ("model", "speedup") else "right")
    for c in calibrations:
        p = c.published
        model = plain(f"{p.model} ({p.gpu})")  # one product's two memory sizes are two figures
        table.add_row(model, f"{p.precision} vs {p.baseline}", f"{p.value:.2f}x", f"{c.estimated:.2f}x",
                      f"{c.error:+.0%}")  # fmt: skip
    console.print(table)
