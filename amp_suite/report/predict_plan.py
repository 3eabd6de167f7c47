"""What `amp-suite predict` estimates, and on which GPUs: a matrix's cells on GPUs the suite has not
run on, behind a good host and a slow one, held against the published speedups; or a run's own
cells on the GPU they ran on, beside what they measured. Typed results for the command to print
(amp_suite.cli.predict, whose tables are amp_suite.cli.predict_tables').

No torch here when imported (the report package's promise). Whether a mode runs on a GPU, or can be
estimated at all, is the precision policy's answer (amp_suite.cell.precision, which imports torch):
it is imported inside the two functions that ask it, as the profiles' code is (report.cell_profiles).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from amp_suite.analysis.roofline import CellEstimate, Host, StepEstimate, estimate_step, host_range, speedup
from amp_suite.analysis.summary import group_key, summarize
from amp_suite.config import CellSpec, ConfigError
from amp_suite.config.base import OK
from amp_suite.config.precisions import (
    ARTICLE_MODES,
    BF16_BASELINE,
    FP8_MODES,
    REFERENCE,
    TF32_BASELINE,
    precision_order,
)
from amp_suite.config.problems import did_you_mean
from amp_suite.config.workloads import WORKLOAD_CONFIG_BY_NAME
from amp_suite.hardware.backends import backend_recorded
from amp_suite.hardware.peaks import GpuSpec, estimated_gpus, gpu_spec
from amp_suite.records.machine import cuda_caps
from amp_suite.records.results import describe_error
from amp_suite.report.benchmark_estimate import estimate_published, published_shape
from amp_suite.report.cell_profiles import Profiles, offline_unless_asked, quiet_libraries, with_named_entry
from amp_suite.report.prediction import (
    Calibration,
    Estimated,
    calibrate,
    estimated_speedups,
    host_figure,
    mean_absolute_error,
)
from amp_suite.report.references import (
    PublishedSpeedup,
    Reference,
    kernel_benchmark,
    published_speedups,
    same_config,
    stated_speedup,
)
from amp_suite.report.sources import check_sources, gather

SUPPORTED_COMPILE = ("off", "default")  # CUDA graphs and autotuned kernels are beyond the model
Gpu = tuple[str, GpuSpec]  # the name asked for (the peak table's match name), and its spec


def config_of(spec) -> dict:
    """A cell's configuration as published figures are matched by: its workload, compile and layout."""
    return {**spec.workload.model_dump(mode="json"), "compile": spec.compile, "channels_last": spec.channels_last}


def compiled(label: str, compile: str) -> str:
    """A compiled cell's label says so: a matrix can hold the same workload eager and compiled."""
    return label if compile == "off" else f"{label}, compiled"


def not_estimated(precision: str, compile: str) -> str | None:
    """Why a roofline can't estimate a cell from a CPU's profile, or None: it estimates the
    article's modes and fp8's, eager or compiled in the default mode, where the mode runs so (fp8
    runs compiled only)."""
    from amp_suite.cell.precision import make_policy  # torch: see the module's docstring

    if precision not in ARTICLE_MODES + FP8_MODES:
        return "a negative control, not a mode to train in"
    if compile not in SUPPORTED_COMPILE:
        return f"compile {compile}: CUDA graphs and autotuned kernels are beyond the model"
    return make_policy(precision, "cpu").unsupported_compile(compile)


def runs_on(precision: str, gpu: GpuSpec) -> str | None:
    """Why the mode does not run on the GPU (its compute capability), as a cell there would say; or None."""
    from amp_suite.cell.precision import make_policy  # torch: see the module's docstring

    return make_policy(precision, "cuda").unsupported_reason(cuda_caps(gpu.name, gpu.capability))


def estimate(profiles: Profiles, spec, label: str, config: dict, gpu: GpuSpec) -> CellEstimate:
    """One cell's step on the GPU, from its profile (made once, Profiles)."""
    costs = profiles.of(spec).costs(compiled=spec.compile != "off")
    return CellEstimate(label, config, spec.batch_size, estimate_step(costs, gpu, spec.precision))


# --- a matrix on GPUs the suite has not run on, against what was published ---


@dataclass(frozen=True)
class MatrixCells:
    """A matrix's cells a roofline estimates (one seed: the estimate is the same for every one), and
    why each mode (with its compile) that it can't is left out."""

    cells: list[CellSpec]
    left_out: dict[str, str]


def matrix_cells(loaded) -> MatrixCells:
    single = [  # one seed: the estimate is the same for every one
        spec for spec in loaded.cells("cpu", force=True)
        if spec.seed == loaded.seed and isinstance(spec.batch_size, int) and spec.ddp is None
    ]  # fmt: skip
    why = {(spec.precision, spec.compile): not_estimated(spec.precision, spec.compile) for spec in single}
    left_out = {f"{mode} {'eager' if c == 'off' else f'compiled ({c})'}": reason
                for (mode, c), reason in why.items() if reason}  # fmt: skip
    return MatrixCells([spec for spec in single if why[spec.precision, spec.compile] is None], left_out)


def fp8_in_question(loaded) -> bool:
    """Whether the matrix asks about fp8: an fp8 mode, or a workload that benchmarks its kernels (torchao's)."""
    benchmarks = any(WORKLOAD_CONFIG_BY_NAME[w.workload].kernel_benchmark for w in loaded.workloads)
    return benchmarks or any(mode in FP8_MODES for mode in loaded.precisions)


def gpu_specs(names: Sequence[str]) -> list[Gpu]:
    """Each GPU named, with the peak table's figures; a ConfigError for one it lacks."""
    specs = []
    for name in names:
        spec = gpu_spec(name)
        if spec is None:
            hint = did_you_mean(name, estimated_gpus())
            raise ConfigError(f"--gpu: no memory bandwidth for {name[:60]!r} in the peak table{hint}")
        specs.append((name, spec))
    return specs


def this_gpu() -> str | None:
    """The name of this machine's first CUDA GPU, as torch gives it; None without one."""
    import torch  # torch: see the module's docstring (predict profiles with it anyway)

    with warnings.catch_warnings():  # an old driver's warning here says only that there is no GPU
        warnings.simplefilter("ignore")
        available = torch.cuda.is_available()
    return torch.cuda.get_device_name(0) if available else None


@dataclass(frozen=True)
class GpuChoice:
    """The GPUs predict estimates by default: those of this machine's generation (its compute
    capability), where it has a GPU the peak table knows, and the published anchors: the GPUs whose
    published figures the matrix's cells meet (each GPU that has any, where it meets none), and
    where fp8 is in question torchao's. `others`: the peak table's GPUs left for --all."""

    gpus: list[str]
    own_generation: list[str]
    anchors: list[str]
    others: list[str]


def default_gpus(cells: Sequence, references: Sequence[Reference], fp8: bool, local: str | None) -> GpuChoice:
    table = estimated_gpus()
    local_spec = gpu_spec(local) if local else None
    own = [n for n in table if local_spec is not None and _spec(n).capability == local_spec.capability]
    published = published_speedups(list(references))
    met = [figure for figure in published if _meets(cells, figure)] or published
    products = {_spec(figure.gpu).name for figure in met if gpu_spec(figure.gpu) is not None}
    if fp8:
        products |= {_spec(r.gpu).name for r in references if kernel_benchmark(r) and gpu_spec(r.gpu) is not None}
    anchors = [n for n in table if _spec(n).name in products and n not in own]
    chosen = own + anchors
    return GpuChoice(chosen, own, anchors, [n for n in table if n not in chosen])


def _spec(name: str) -> GpuSpec:
    spec = gpu_spec(name)
    assert spec is not None, name  # the peak table's own names, or checked by the caller
    return spec


def _meets(cells: Sequence, figure: PublishedSpeedup) -> bool:
    """Whether the cells hold both sides of the published speedup (its modes, configurations, batches)."""

    def has(mode: str, wanted: dict) -> bool:
        return any(spec.precision == mode and spec.batch_size == wanted.get("batch_size")
                   and same_config(config_of(spec), wanted) for spec in cells)  # fmt: skip

    return has(figure.precision, figure.config) and has(figure.baseline, figure.baseline_config)


@dataclass(frozen=True)
class GpuEstimate:
    """A matrix's cells on one GPU: behind the good host (`estimates`, with each one's speedup over
    each baseline) and the slow one (`slow`, with the speedup over fp32); the modes the GPU can't
    run and why; and the published speedups on the GPU beside the good host's estimates."""

    name: str
    gpu: GpuSpec
    left_out: dict[str, str]
    estimates: list[CellEstimate]
    speedups: dict[str, list[Estimated | None]]
    slow: list[CellEstimate]
    slow_speedups: list[Estimated | None]
    calibrations: list[Calibration]


def estimate_on(
    name: str, gpu: GpuSpec, cells: Sequence, profiles: Profiles, hosts: tuple[Host, Host], published
) -> GpuEstimate:
    """The cells the GPU runs, estimated behind each of `hosts` (a good and a slow one); the
    published speedups held against the good host's estimates: the table's assumption, fixed
    before any comparison."""
    runs = {spec.precision: runs_on(spec.precision, gpu) for spec in cells}
    left_out = {mode: why for mode, why in runs.items() if why}
    here = [spec for spec in cells if runs[spec.precision] is None]
    good, slow = (
        [estimate(profiles, s, compiled(s.workload.name, s.compile), config_of(s), replace(gpu, launch_us=h.launch_us))
         for s in here]
        for h in hosts
    )  # fmt: skip
    fp8 = any(spec.precision in FP8_MODES for spec in here)  # then also beside what it would replace
    baselines = (REFERENCE, TF32_BASELINE, *([BF16_BASELINE] if fp8 else []))
    speedups = {baseline: estimated_speedups(good, baseline) for baseline in baselines} if here else {}
    slow_speedups = estimated_speedups(slow, REFERENCE)
    return GpuEstimate(name, gpu, left_out, good, speedups, slow, slow_speedups, calibrate(good, published, name))


@dataclass(frozen=True)
class AgainstPublished:
    """Every GPU's estimates, and the mean error over the published speedups they were held against."""

    hosts: tuple[Host, Host]
    gpus: list[GpuEstimate] = field(default_factory=list)

    @property
    def calibrations(self) -> list[Calibration]:
        return [c for gpu in self.gpus for c in gpu.calibrations]


def hosts() -> tuple[Host, Host]:
    """The good host and the slow one, the ends of the peak table's range."""
    good, *_, slow = host_range()
    return good, slow


def profiling_words(matrix: str, cells: Sequence) -> str:
    """What a matrix's profiles are of, in one line: each workload and layout at its batches."""
    batches: dict[str, list[int]] = {}
    for spec in cells:
        layout = " (channels_last)" if spec.channels_last else ""
        found = batches.setdefault(compiled(f"{spec.workload.name}{layout}", spec.compile), [])
        found += [] if spec.batch_size in found else [spec.batch_size]
    which = "; ".join(f"{label} at batch {', '.join(map(str, sizes))}" for label, sizes in batches.items())
    return f"profiling {matrix} on this CPU (each mode's op profile): {which}"


def against_published(
    cells: Sequence, gpus: Sequence[Gpu], profiles: Profiles, references: Sequence[Reference]
) -> AgainstPublished:
    published = published_speedups(list(references))
    result = AgainstPublished(hosts())
    for name, gpu in gpus:
        result.gpus.append(estimate_on(name, gpu, cells, profiles, result.hosts, published))
    return result


# --- torchao's float8 benchmark, on its publisher's GPU ---


@dataclass(frozen=True)
class Float8Row:
    """A published float8 benchmark figure beside the estimate of the same program, compiled, on
    the publisher's GPU: its shape (M, K, N), that GPU, each mode's step, and the two speedups."""

    shape: tuple[int, int, int]
    gpu: GpuSpec
    steps: dict[str, StepEstimate]
    calibration: Calibration


def float8_benchmark(
    gpus: Sequence[Gpu], references: Sequence[Reference], say: Callable[[str], None]
) -> list[Float8Row]:
    """torchao's published float8 single-linear speedups on the GPUs asked for, beside the estimate
    of the same program (amp_suite.cell.float8_benchmark), compiled, on the publisher's GPU."""
    asked = {gpu.name for _, gpu in gpus}
    rows = []
    for reference in (r for r in references if kernel_benchmark(r)):
        publishers = gpu_spec(reference.gpu)
        if publishers is None or publishers.name not in asked:
            continue
        shape = published_shape(reference.config)
        say(f"profiling torchao's float8 benchmark at M, K, N = {', '.join(map(str, shape))}")
        with quiet_libraries():
            estimated = estimate_published(reference)
        assert estimated is not None  # its publisher's GPU is in the peak table (above)
        gpu, steps = estimated
        ratio = speedup(steps[reference.precision], steps[reference.baseline or BF16_BASELINE])
        rows.append(Float8Row(shape, gpu, steps, Calibration(stated_speedup(reference), ratio)))
    return rows


# --- what a stated error says of the user's own model ---


def stated_error_line(workloads: Sequence, references: Sequence[Reference], measured: bool) -> str | None:
    """Which of the errors the suite states applies to a user's own model (a workload that names an
    entry): none. They are the estimate's against the published figures (README.md, docs/reports.md),
    each of one published model; an entry is code no publisher ran. None where no workload is one."""
    own = sorted({w.name for w in workloads if getattr(w, "entry", None) is not None})
    if not own:
        return None
    models = ", ".join(sorted({r.model for r in references}))
    where = ("its error against your records' speedups (above) is the one that applies" if measured
             else "predict --results on a run of it gives its own")  # fmt: skip
    return (f"stated error: none applies to {', '.join(own)} (your own model): the mean errors stated in README.md"
            f" and docs/reports.md are the estimate's on published models alone ({models}); {where}")  # fmt: skip


# --- a run's records, on the GPU they ran on, beside what they measured ---

Chosen = dict[tuple, tuple[Any, CellSpec]]  # (machine, setup, precision) -> a record of the cell, and the cell


def records_of(results: str) -> list:
    if not Path(results).exists():
        raise ConfigError(f"--results {results[:200]}: no such run folder or results.jsonl")
    check_sources([results], None)
    records = gather([results], None).records
    if not records:
        raise ConfigError(f"--results {results[:200]}: no records")
    return records


def label(record) -> str:
    """The workload as the records' own tables name it, with its matrix: one run folder can hold
    the same workload in several configurations, one a matrix."""
    return compiled(f"{record.workload} ({record.matrix})" if record.matrix else record.workload, record.compile)


def spec_of(record) -> CellSpec | None:
    """The cell a record measured, at the batch it ran, to profile on this CPU; None where its config
    no longer validates (a record of another version of the suite: left out, as the report leaves it)."""
    try:
        return CellSpec.model_validate({**record.config, "batch_size": record.batch_size, "device": "cpu"})
    except ValidationError:
        return None


def chosen_cells(records: Sequence, entries: list[str]) -> tuple[Chosen, dict[str, str]]:
    """(machine, setup, precision) -> a record of that cell (its first seed), and the cell it measured:
    the single-GPU cells that finished ok on CUDA, which a roofline can estimate; and, by the
    records' label, why a cell of those is left out (its records name code the user did not)."""
    chosen: Chosen = {}
    left_out: dict[str, str] = {}
    for record in records:
        if record.status != OK or backend_recorded(record.device).is_host or record.world_size:
            continue
        estimable = not not_estimated(record.precision, record.compile) and isinstance(record.batch_size, int)
        measured = spec_of(record) if estimable else None
        if measured is None:
            continue
        workload, why = with_named_entry(measured.workload, entries)
        if why is not None:
            left_out.setdefault(label(record), why)
            continue
        chosen.setdefault(group_key(record), (record, measured.model_copy(update={"workload": workload})))
    return chosen, left_out


def profiled(chosen: Chosen, profiles: Profiles, left_out: dict[str, str]) -> Chosen:
    """The chosen cells whose every mode profiles; a cell with one that doesn't (a model folder not
    here, an entry that raises) is left out, its reason in `left_out`."""
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
            left_out.setdefault(label(record), f"profiling it failed: {said}")
    return {key: cell for key, cell in chosen.items() if key[:2] not in failed}


def cells_on(chosen: Chosen, device_name: str) -> dict[tuple, dict[str, tuple[Any, CellSpec]]]:
    """The chosen (record, cell) pairs of one GPU, by cell (machine, setup), then mode, fp32 first
    (as every table has it)."""
    cells: dict = {}
    for (machine, setup, precision), (record, spec) in chosen.items():
        if record.device_name == device_name:
            cells.setdefault((machine, setup), {})[precision] = (record, spec)
    return {
        cell: dict(sorted(modes.items(), key=lambda mode: precision_order(mode[0]))) for cell, modes in cells.items()
    }


@dataclass(frozen=True)
class MeasuredTable:
    """One GPU's cells over one baseline: each mode's estimate, its Estimated beside what its records
    measured (None for the baseline), and the step they measured (ms, or None)."""

    baseline: str
    estimates: list[CellEstimate] = field(default_factory=list)
    found: list[Estimated | None] = field(default_factory=list)
    measured_steps: list[float | None] = field(default_factory=list)


@dataclass(frozen=True)
class MeasuredOnGpu:
    """A run's cells on one GPU: the host figures they were estimated behind (in words, with the
    cells behind each), and a table per baseline."""

    gpu: GpuSpec
    hosts: dict[str, list[str]]
    tables: list[MeasuredTable]

    @property
    def rows(self) -> list[Estimated]:
        return [row for table in self.tables for row in table.found if row is not None]


def measured_on(gpu: GpuSpec, cells: dict, summary: dict, profiles: Profiles, launch_us: float | None) -> MeasuredOnGpu:
    """One GPU's cells estimated behind their host and set beside what they measured, a table per
    baseline: over fp32, as every table has it; a cell without fp32 (fp8 against the bf16 it would
    replace) over bf16."""
    tables: dict[str, MeasuredTable] = {}
    hosts: dict[str, list[str]] = {}
    for (machine, setup), cell in cells.items():
        own = [r.machine.host_us_per_kernel for r, _ in cell.values() if r.machine and r.machine.host_us_per_kernel]
        host = host_figure(launch_us, own, gpu.launch_us)
        behind = replace(gpu, launch_us=host.launch_us)
        baseline = REFERENCE if REFERENCE in cell else BF16_BASELINE
        table = tables.setdefault(baseline, MeasuredTable(baseline))
        estimated = [estimate(profiles, spec, label(r), {"setup": setup}, behind) for r, spec in cell.values()]
        table.estimates.extend(estimated)
        table.measured_steps.extend(getattr(summary.get((machine, setup, mode)), "step_time_ms", None) for mode in cell)
        hosts.setdefault(host.words(), []).append(estimated[0].label)
        # batch_sizes auto: a mode at another batch has none
        for row in estimated_speedups(estimated, table.baseline, host.source):
            table.found.append(row and with_measured(row, summary.get((machine, setup, row.precision))))
    return MeasuredOnGpu(gpu, hosts, list(tables.values()))


def with_measured(row: Estimated, measured) -> Estimated:
    """The estimate with what the records measured of the same cell (a summary row), where they did,
    over the same baseline."""
    ratio = measured.speedups.get(row.baseline) if measured is not None else None
    step = measured.step_time_ms if measured is not None else None
    return row.model_copy(update={"measured": ratio.value if ratio else None, "measured_step_ms": step})


def summary_of(records: Sequence) -> dict:
    """The records' summary rows by (machine, setup, precision)."""
    return {(row.machine, row.setup, row.precision): row for row in summarize(list(records))}


def mean_error(compared: Sequence[Calibration | Estimated]) -> tuple[int, float | None]:
    """How many of `compared` have an error, and the mean of their sizes."""
    return sum(c.error is not None for c in compared), mean_absolute_error(compared)
