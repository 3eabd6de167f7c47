"""`amp-suite predict`: each mode's estimated speedup on GPUs the suite has not run on, behind a good
host and a slow one, beside what was published for them; or, given a run's records, on the GPU and
behind the host they ran on (its measured cost per kernel, or one given), beside what they measured.
The tables are amp_suite.cli.predict_tables'."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from amp_suite.cli.common import MatrixOption, app, fail, resolve_matrix, say, source
from amp_suite.cli.predict_cells import entry_option, offline_unless_asked
from amp_suite.cli.predict_tables import (
    config_of,
    print_calibrations,
    print_estimates,
    print_float8_benchmark,
    print_measured,
    say_host_bound,
    say_windows_set_aside,
)
from amp_suite.config import ConfigError, load_matrix
from amp_suite.config.problems import did_you_mean
from amp_suite.paths import is_folder
from amp_suite.records.rundir import RunDirectory
from amp_suite.text import plain

DEFAULT_MATRIX = Path("nvidia-resnet50")  # the matrix whose published speedups the estimate is held against
MAX_LAUNCH_US = 10_000.0


@app.command()
def predict(
    gpu: Annotated[
        Optional[list[str]],
        typer.Option(
            help="A GPU of the peak table as torch names it (A100-SXM4-80GB); repeat for several. "
            "Default: every GPU the table has a memory bandwidth for."
        ),
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
            _against_measured(results, launch_us, model or [])
            return
        if model:
            raise ConfigError("--model names the entry of --results' own cells; a matrix names its own")
        if launch_us is not None:
            raise ConfigError("--launch-us sets the host of --results' records; --gpu shows a good and a slow host")
        loaded = load_matrix(resolve_matrix(matrix if matrix is not None else DEFAULT_MATRIX))
        gpus = _gpus(gpu)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    _against_published(loaded, gpus)


def host_microseconds(value: str) -> float:
    """--launch-us: a host's cost per kernel, above 0 and at most 10 ms (a host that slow runs nothing)."""
    try:
        figure = float(value)
    except ValueError:
        raise typer.BadParameter(f"{value[:40]!r} is not a number of microseconds") from None
    if not 0 < figure <= MAX_LAUNCH_US:  # NaN fails this too
        raise typer.BadParameter(f"{value[:40]!r}: give microseconds above 0 and at most {MAX_LAUNCH_US:g}")
    return figure


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
        from amp_suite.cli.predict_cells import profile_cell
        from amp_suite.config.precisions import MODE_BY_NAME, REFERENCE

        ran = spec.precision if MODE_BY_NAME[spec.precision].autocast else REFERENCE
        key = (spec.workload.model_dump_json(), spec.channels_last, spec.batch_size, ran)
        if key not in self.made:
            layout = " (channels_last)" if spec.channels_last else ""
            say(f"profiling {spec.matrix}: {spec.workload.name}{layout} at batch {spec.batch_size} in {ran}")
            self.made[key] = profile_cell(spec.model_copy(update={"precision": ran}))
        return self.made[key]


def _against_published(loaded, gpus: list) -> None:
    from amp_suite.analysis.roofline import host_range
    from amp_suite.report.prediction import calibrate, mean_absolute_error
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
    good, *_, slow = host_range()
    say(f"hosts: each estimate behind {good.name} at {good.launch_us:g} µs a kernel ({good.source}), and behind "
        f"{slow.name} at {slow.launch_us:g} µs ({slow.source})")  # fmt: skip
    profiles, references = _Profiles(), load_references(None)
    published = published_speedups(references)
    errors = []
    for name, gpu in gpus:
        estimates = _estimate_on(gpu, cells, profiles, (good, slow))
        # Held against the good host's estimate: the table's assumption, fixed before any comparison.
        calibrations = calibrate(estimates, published, name)
        errors += calibrations
        print_calibrations(gpu.name, calibrations)
    error = mean_absolute_error(errors)
    if error is not None:
        measured = sum(c.error is not None for c in errors)
        say(f"error on {measured} published speedup(s): mean |estimated / published - 1| = {error:.0%}")
    _against_float8_benchmark(gpus, references)


def _estimate_on(gpu, cells: list, profiles: _Profiles, hosts: tuple) -> list:
    """The cells the GPU runs, estimated behind each of `hosts` (a good and a slow one), in a table;
    the good host's estimates, which the published figures are held against."""
    from dataclasses import replace

    from amp_suite.config.precisions import BF16_BASELINE, FP8_MODES, REFERENCE, TF32_BASELINE
    from amp_suite.report.prediction import estimated_speedups

    runs = {spec.precision: _runs_on(spec.precision, gpu) for spec in cells}
    _say_left_out(f"on {gpu.name}, ", {mode: why for mode, why in runs.items() if why})
    here = [spec for spec in cells if runs[spec.precision] is None]
    if not here:
        return []
    behind = {host: [profiles.estimate(s, _compiled(s.workload.name, s.compile), config_of(s),
                                       replace(gpu, launch_us=host.launch_us)) for s in here]
              for host in hosts}  # fmt: skip
    good, slow = hosts
    fp8 = any(spec.precision in FP8_MODES for spec in here)  # then also beside what it would replace
    baselines = (REFERENCE, TF32_BASELINE, *([BF16_BASELINE] if fp8 else []))
    speedups = {b: estimated_speedups(behind[good], b) for b in baselines}
    title = f"Estimated on {gpu.name} (a roofline of each step, profiled on this CPU; behind {good.name})"
    print_estimates(title, behind[good], speedups, (slow, behind[slow], estimated_speedups(behind[slow], REFERENCE)))
    for host in hosts:
        say_host_bound(gpu.name, behind[host], f"{host.name}, {host.launch_us:g} µs a kernel")
    return behind[good]


def _against_float8_benchmark(gpus: list, references: list) -> None:
    """torchao's published float8 single-linear speedups on the GPUs asked for, beside the estimate
    of the same program (amp_suite.cell.float8_benchmark), compiled, on the publisher's GPU."""
    from amp_suite.analysis.roofline import speedup
    from amp_suite.cell.float8_benchmark import BENCHMARK
    from amp_suite.hardware.peaks import gpu_spec
    from amp_suite.report.benchmark_estimate import estimate_published, published_shape
    from amp_suite.report.prediction import Calibration, mean_absolute_error
    from amp_suite.report.references import stated_speedup

    asked = {gpu.name for _, gpu in gpus}
    rows = []
    for reference in (r for r in references if r.config.get("workload") == BENCHMARK):
        publishers = gpu_spec(reference.gpu)
        if publishers is None or publishers.name not in asked:
            continue
        shape = published_shape(reference.config)
        say(f"profiling torchao's float8 benchmark at M, K, N = {', '.join(map(str, shape))}")
        gpu, steps = estimate_published(reference)
        estimated = speedup(steps[reference.precision], steps[reference.baseline])
        rows.append((shape, gpu, steps, Calibration(stated_speedup(reference), estimated)))
    if not rows:
        return
    print_float8_benchmark(rows)
    error = mean_absolute_error([calibration for *_, calibration in rows])
    say(f"error on {len(rows)} torchao float8 speedup(s): mean |estimated / published - 1| = {error:.0%}")


def _against_measured(results: str, launch_us: float | None, entries: list[str]) -> None:
    """The records' single-GPU cells (eager, or compiled in the default mode) estimated on the GPU
    each ran on, behind the host each ran on, beside the speedup over fp32 (or bf16) the records
    measured there. A cell of the user's own model only where they name its entry (`entries`)."""
    from amp_suite.analysis.summary import summarize
    from amp_suite.hardware.peaks import gpu_spec
    from amp_suite.report.prediction import mean_absolute_error

    records = _records_of(results)
    summary = {(row.machine, row.setup, row.precision): row for row in summarize(records)}
    chosen, left_out = _chosen(records, entries)
    profiles = _Profiles()
    chosen = _profiled(chosen, profiles, left_out)
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
        rows += _measured_on(gpu, _cells_on(chosen, device_name), summary, profiles, launch_us)
    for name in sorted(unknown):
        say(f"{name}: not estimated, the peak table has no memory bandwidth for it (references/peaks/gpu-peaks.yaml)")
    error = mean_absolute_error(rows)
    if error is not None:
        count = sum(row.error is not None for row in rows)
        say(f"error on {count} measured speedup(s): mean |estimated / measured - 1| = {error:.0%}")
    if is_folder(Path(results)):
        _write_prediction(RunDirectory(Path(results)), rows)


def _records_of(results: str) -> list:
    from amp_suite.report.sources import check_sources, gather

    if not Path(results).exists():
        raise ConfigError(f"--results {results[:200]}: no such run folder or results.jsonl")
    check_sources([results], None)
    records = gather([results], None).records
    if not records:
        raise ConfigError(f"--results {results[:200]}: no records")
    return records


def _chosen(records: list, entries: list[str]) -> tuple[dict, dict[str, str]]:
    """(machine, setup, precision) -> a record of that cell (its first seed), and the cell it measured:
    the single-GPU cells that finished ok on CUDA, which a roofline can estimate; and, by the
    records' label, why a cell of those is left out (its records name code the user did not)."""
    from amp_suite.analysis.summary import group_key
    from amp_suite.cli.predict_cells import with_named_entry

    chosen, left_out = {}, {}
    for record in records:
        if record.status == "ok" and record.device == "cuda" and not record.world_size:
            estimable = not _not_estimated(record.precision, record.compile) and isinstance(record.batch_size, int)
            measured = estimable and _spec_of(record)
            if not measured:
                continue
            workload, why = with_named_entry(measured.workload, entries)
            if why is not None:
                left_out.setdefault(_label(record), why)
                continue
            chosen.setdefault(group_key(record), (record, measured.model_copy(update={"workload": workload})))
    return chosen, left_out


def _profiled(chosen: dict, profiles: _Profiles, left_out: dict[str, str]) -> dict:
    """The chosen cells whose every mode profiles; a cell with one that doesn't (a model folder not
    here, an entry that raises) is left out, its reason in `left_out`."""
    from amp_suite.records.results import describe_error

    offline_unless_asked([spec for _, spec in chosen.values()])
    failed = set()
    for (machine, setup, _), (record, spec) in chosen.items():
        if (machine, setup) in failed:
            continue
        try:
            profiles.of(spec)
        except Exception as exc:  # the record's model can't be built here: its cell, not the command, fails
            failed.add((machine, setup))
            said = " ".join(describe_error(exc, 300).split())  # one line, whatever the library's text
            left_out.setdefault(_label(record), f"profiling it failed: {said}")
    return {key: cell for key, cell in chosen.items() if key[:2] not in failed}


def _measured_on(gpu, cells: dict, summary: dict, profiles: _Profiles, launch_us: float | None) -> list:
    """One GPU's cells estimated behind their host and set beside what they measured, a table per
    baseline; the rows with a speedup."""
    from dataclasses import replace

    from amp_suite.config.precisions import BF16_BASELINE, REFERENCE
    from amp_suite.report.prediction import estimated_speedups, host_figure

    by_baseline: dict[str, tuple[list, list, list]] = {}  # baseline -> the cells' estimates, speedups, measured steps
    hosts: dict[str, list[str]] = {}  # the host's figure in words -> the cells behind it
    for (machine, setup), cell in cells.items():
        own = [r.machine.host_us_per_kernel for r, _ in cell.values() if r.machine and r.machine.host_us_per_kernel]
        host = host_figure(launch_us, own, gpu.launch_us)
        behind = replace(gpu, launch_us=host.launch_us)
        # Over fp32, as every table has it; a cell without fp32 (fp8 against the bf16 it would replace) over bf16.
        baseline = REFERENCE if REFERENCE in cell else BF16_BASELINE
        estimates, found, steps = by_baseline.setdefault(baseline, ([], [], []))
        estimated = [profiles.estimate(spec, _label(r), {"setup": setup}, behind) for r, spec in cell.values()]
        estimates += estimated
        steps += [getattr(summary.get((machine, setup, mode)), "step_time_ms", None) for mode in cell]
        hosts.setdefault(host.words(), []).append(estimated[0].label)
        # batch_sizes auto: a mode at another batch has none
        for row in estimated_speedups(estimated, baseline, host.source):
            found.append(row and _with_measured(row, summary.get((machine, setup, row.precision))))
    for words, labels in hosts.items():
        say(f"host on {gpu.name}: {words}" + ("" if len(hosts) == 1 else f": {'; '.join(map(plain, labels))}"))
    rows = []
    for baseline, (estimates, found, steps) in by_baseline.items():
        rows += [row for row in found if row is not None]
        title = f"Estimated against measured on {gpu.name}{'' if baseline == REFERENCE else f', over {baseline}'}"
        print_measured(title, estimates, found, steps)
        say_host_bound(gpu.name, estimates)
    return rows


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
