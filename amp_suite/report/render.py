"""The report as files: report.json for machines, report.md for pull requests, report.html for people.

Markdown and HTML show the same sections, built once as plain tables of text. report.html is
self-contained (styles inline, figures as data: URIs, no script, no link out of the page) so it
renders inside MLflow's sandboxed artifact viewer and from a copied folder.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import get_args

from markupsafe import Markup, escape

from amp_suite.analysis import words
from amp_suite.analysis.answer import UNJUDGED, WORTHWHILE_GAIN, Accuracy, Answer
from amp_suite.analysis.derived import DATA_PARALLEL, LARGEST_BATCH, REPORT, RESULTS, Derived, declared, shown
from amp_suite.analysis.quantities import INDICATIVE, INVALID, PASS
from amp_suite.analysis.summary import SummaryRow, other_baselines
from amp_suite.analysis.words import (
    parity_brief,
    parity_words,
    ratio_words,
    target_words,
    times,
    verdict_words,
)
from amp_suite.config import NOISY_SPREAD, Status
from amp_suite.config.precisions import (
    BF16_BASELINE,
    REFERENCE,
    precision_order,
)
from amp_suite.files import write_whole
from amp_suite.records.schema import Topic
from amp_suite.report.build import CellMeasures, Report
from amp_suite.report.claims import ARTICLE, CLAIMS, NOT_MEASURED, ClaimVerdict
from amp_suite.report.figures import Figure
from amp_suite.report.prediction import mean_absolute_error
from amp_suite.report.references import NO_MATCHING_RUN
from amp_suite.report.references import Verdict as ReferenceVerdict
from amp_suite.text import markdown_cell, printable

FORMATS = ("html", "md", "json")


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    notes: Sequence[str] = ()  # numbered footnotes, e.g. why cells were skipped (each reason once)


def write_report(report: Report, figures: Sequence[Figure], out: Path, formats: Sequence[str]) -> list[Path]:
    """Writes each format whole (a temporary file renamed into place); returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if "json" in formats:
        written.append(_write(out / "report.json", report.model_dump_json(indent=2)))
    if figures and "md" in formats:
        (out / "figures").mkdir(exist_ok=True)
        written += [write_whole(out / "figures" / figure.name, figure.png) for figure in figures]
    if "md" in formats:
        written.append(_write(out / "report.md", to_markdown(report, figures)))
    if "html" in formats:
        written.append(_write(out / "report.html", to_html(report, figures)))
    return written


def sections(report: Report) -> list[Section]:
    labels = {m.id: m.label for m in report.machines}
    found = [_answer(report, labels)] if report.answer else []
    found.append(_machines(report))
    found += [table for m in report.machines for table in _glance(report, m.id, m.label)]
    found += [without_empty_columns(_machine_rows(report, m.id, m.label), keep=6) for m in report.machines]
    if len(report.machines) > 1:
        found.append(_across(report, labels))
    if any(row.max_batch for row in report.rows):
        found.append(_largest_batches(report, labels))
    if any(row.world_size is not None for row in report.rows):
        found.append(_data_parallel(report, labels))
    found.append(_references(report, labels))
    if report.estimated:
        found.append(_estimated(report))
    found.append(_claims(report, labels))
    found += _cells(report, labels)
    return found


def _answer(report: Report, labels: dict[str, str]) -> Section:
    """Per machine and comparison: the mode to train in, and whether accuracy survives, in words."""
    several_matrices = len({a.matrix for a in report.answer}) > 1
    timed = any(a.timed for a in report.answer)  # side by side: how long each comparison was timed
    rows = [
        [labels[a.machine], a.workload + (f" ({a.matrix})" if several_matrices else ""), a.batch, a.variant,
         a.mode or a.verdict, _mode_accuracy(a), a.sentence, *([a.timed or "-"] if timed else [])]
        for a in report.answer
    ]  # fmt: skip
    disagreements = [
        f"{labels[a.machine]}, {a.workload}: {a.rule_note}" for a in report.answer if a.rule_note
    ]
    intro = (
        "Train in the fastest mode that beats fp32 beyond noise (its speedup's 95% interval above 1, with no cell"
        f" of it or of fp32 varying by more than {NOISY_SPREAD:.0%} across its windows, nor a GPU slowing down for"
        " heat; or, timed side by side until the stopping rule decided, its repeated interval above 1) and keeps"
        " accuracy (its parity test passes, or with one seed its delta is within the margin; and"
        " it reaches the workload's target, where one is declared). Stay with fp32 where no mode gains"
        f" {WORTHWHILE_GAIN:.0%} or more (every interval below that), or the faster ones lose accuracy;"
        " inconclusive where a mode that keeps accuracy could go either way, with what to rerun. Negative"
        " controls are never recommended. With a target, the time to it is given beside the speedup."
    )
    headers = ("machine", "workload", "batch", "variant", "train in", "accuracy", "the answer")
    headers += ("timed",) if timed else ()
    return Section("The answer", intro, headers, rows, disagreements)


def _mode_accuracy(answer: Answer) -> str:
    """Accuracy under the mode to train in, the column beside it: fp32, the reference, has nothing to
    keep, and what the faster modes did to accuracy is the sentence's to say."""
    if answer.accuracy == UNJUDGED:  # whichever mode: no accuracy was judged, and the row must say so
        return f"speed only: accuracy {UNJUDGED} ({REFERENCE} did not learn)"
    return "-" if answer.mode in (None, REFERENCE) else f"accuracy {answer.accuracy}"


def _glance(report: Report, machine: str, label: str) -> list[Section]:
    """In the shape of NVIDIA's and MLPerf's tables, a row per workload and a column per precision
    mode, one table per topic so that each fits a screen: speed, memory, accuracy."""
    mine = [r for r in report.rows if r.machine == machine]
    setups: dict[str, dict[str, SummaryRow]] = {}
    for row in mine:
        setups.setdefault(row.setup, {})[row.precision] = row
    precisions = sorted({r.precision for r in mine}, key=precision_order)
    several_matrices = len({r.matrix for r in mine}) > 1

    def table(topic: str, intro: str, label_of: Callable[[SummaryRow], str | None], cell: GlanceCell) -> Section:
        rows = []
        for group in setups.values():
            first = next(iter(group.values()))
            where = first.workload + ("" if first.variant == "eager" else f", {first.variant}")
            where += f", {first.matrix}" if several_matrices else ""
            base = BF16_BASELINE if first.kernel_benchmark else REFERENCE  # what a benchmark is compared with
            shown = [cell(group[p], base) if p in group else "-" for p in precisions]
            unit = label_of(first)
            rows.append([where + (f" ({unit})" if unit else ""), first.batch, *shown])
        headers = ["workload", "batch", *precisions]
        return without_empty_columns(Section(f"{topic} on {label}", intro, headers, rows), keep=3)

    speed = (
        f"{REFERENCE}: throughput, the mean over the runs that finished ± their seed-to-seed standard deviation"
        f" (n: runs). Every other mode: its speedup against {REFERENCE}, with its 95% interval in brackets."
        f" A kernel benchmark's modes are held against {BF16_BASELINE}, as it was published."
    )
    memory = (
        f"{REFERENCE}: peak memory. Every other mode: its peak memory against {REFERENCE}'s (a kernel"
        " benchmark's: its own)."
    )
    accuracy = (
        f"The validation metric, mean over seeds; beside every mode but {REFERENCE}, the parity verdict against"
        f" {REFERENCE}'s on the same seeds. Every cell's figures are in the tables below."
    )
    return [
        table("Speed", speed, lambda row: row.unit, _speed_cell),
        table("Memory", memory, lambda row: None, _memory_cell),
        table("Accuracy", accuracy, lambda row: row.val_metric_label or "no metric", _accuracy_cell),
    ]


GlanceCell = Callable[[SummaryRow, str], str]  # (a mode's row, the mode its setup is held against) -> its cell


def _speed_cell(row: SummaryRow, base: str) -> str:
    if row.throughput is None:
        return row.status
    if row.precision != base:
        return ratio_words(row.speedups.get(base))
    spread = f" ± {row.throughput_stdev:,.0f}" if row.throughput_stdev is not None else ""
    return f"{row.throughput:,.0f}{spread} (n={row.runs})"


def _memory_cell(row: SummaryRow, base: str) -> str:
    if row.peak_memory_mb is None:
        return "-"
    if base == REFERENCE and row.precision != REFERENCE:
        return declared("memory_ratio").written(row)
    return f"{row.peak_memory_mb:,.0f} MB"


def _accuracy_cell(row: SummaryRow, base: str) -> str:
    if row.val_metric is None:
        return "-"
    return f"{row.val_metric:.4g}" + ("" if row.precision == REFERENCE else f", {parity_brief(row.parity)}")


def _cells(report: Report, labels: dict[str, str]) -> list[Section]:
    """Every quantity each record measured (the record schema's), one table per topic that any record
    measured: a row per record that measured something of it, a column per quantity."""
    several = len(report.machines) > 1
    sections = []
    for topic in get_args(Topic):
        names = [name for name in report.units if report.topics.get(name) == topic]
        measured = [c for c in report.cells if any(name in c.measured for name in names)]
        if not measured:
            continue
        columns = [f"{name} ({unit})" if (unit := report.units[name]) else name for name in names]
        headers = [*(["machine"] if several else []), "cell", "status", *columns]
        rows = [
            [*([labels[c.machine]] if several else []), c.cell_id, c.status, *(_measure(c, name) for name in names)]
            for c in measured
        ]
        sections.append(Section(f"Every cell's {topic} measurements", _CELLS_INTRO, headers, rows))
    return sections


_CELLS_INTRO = (
    "Every quantity of this topic each cell measured, as results.jsonl holds it (throughput in the workload's unit,"
    " as in the tables above): one row per record that measured any ('-': not measured by that cell)."
)


def _measure(cell: CellMeasures, name: str) -> str:
    value = cell.measured.get(name)
    if name == "throughput" and value is not None:
        return _rate(value, cell.throughput_unit)
    return _quantity(value)


def _quantity(value: float | None) -> str:
    """Four significant digits, in plain notation from 0.001 up: 42,090, not 4.209e+04."""
    if value is None:
        return "-"
    if float(value).is_integer():
        return f"{int(value):,}"
    if not math.isfinite(value) or abs(value) < 1e-3:
        return f"{value:.4g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    shown = f"{value:,.{decimals}f}"
    return shown.rstrip("0").rstrip(".") if "." in shown else shown


def _machines(report: Report) -> Section:
    rows = [
        [m.label, m.device_name, m.compute_capability or "-", m.driver or "-", m.cuda or "-", m.torch or "-",
         f"{len(m.hosts)}: {', '.join(m.hosts)}" if m.hosts else "-", str(m.records)]
        for m in report.machines
    ]  # fmt: skip
    intro = (
        "Records pool only within a machine: the same device model and software stack (driver, CUDA, torch)."
        " Hosts with the same key are pooled, and counted here."
    )
    return Section("Machines", intro, ("machine", "device", "cc", "driver", "CUDA", "torch", "hosts", "records"), rows)


def _machine_rows(report: Report, machine: str, label: str) -> Section:
    mine = [r for r in report.rows if r.machine == machine]
    others = other_baselines(mine, report.baseline)
    derived = shown(REPORT, mine, RESULTS)  # the declared quantities (analysis.derived)
    headers = (
        "matrix", "workload", "batch", "variant", "precision", "status", "throughput", "TFLOP/s (MFU)",
        f"speedup vs {report.baseline}", *(f"vs {b}" for b in others), *(q.header for q in derived),
        "parity (delta / margin, test)", f"to target (vs {REFERENCE})",
    )  # fmt: skip
    bounds = any(r.bound is not None for r in mine)  # GPU rows: what set the step's pace
    headers += ("bound (evidence)", f"GPU work vs {REFERENCE}") if bounds else ()
    notes: dict[str, int] = {}
    rows = [_result_cells(r, (report.baseline, *others), derived, notes) + _bound_cells(r, bounds) for r in mine]
    intro = (
        "Throughput is the mean over seeds that finished; a speedup's interval (95%, in brackets) comes from the "
        "windows of each seed's timed steps (paired window by window where the modes ran side by side) and from "
        "the seeds' spread, on the log scale. Parity compares the validation metric with fp32's on the same "
        "seeds: with two or more, a one-sided paired t test of non-inferiority at the margin "
        f"({words.PARITY_WORDS[PASS]}: p below alpha, 0.05 by default; its p-value and seeds shown); "
        f"{words.PARITY_WORDS[INDICATIVE]} with one (marked {words.AT_RISK_FLAG.rstrip(':')} where its delta is "
        f"beyond the margin); {words.PARITY_WORDS[INVALID]} where a seed saw other data or batches than fp32's. "
        "To target: fp32's training time to the workload's target over this mode's (warmup steps and evaluations "
        "excluded), on the seeds both reached it, with the seeds that reached it. Noisy: a seed's throughput "
        "varied by more "
        f"than {NOISY_SPREAD:.0%} across its timed windows ((max - min) / median, the widest shown): the machine "
        "changed under it, and no answer rests on it; a host-bound row's spread is its host's jitter instead. "
        "Bound (GPU rows): host-bound where the GPU sat idle at least half the step (its kernels traced on warmup "
        "steps), gpu-bound at most a fifth, mixed between; inferred from MFU where a record has no trace. GPU "
        f"work vs {REFERENCE}: {REFERENCE}'s GPU busy time per step over this mode's, the speedup a host that "
        "keeps the GPU fed would see."
    )
    footnotes = [f"[{number}] {reason}" for reason, number in notes.items()]
    return Section(f"Results on {label}", intro, headers, rows, footnotes)


def _result_cells(
    row: SummaryRow, baselines: Sequence[str], derived: Sequence[Derived], notes: dict[str, int]
) -> list[str]:
    return [
        row.matrix,
        row.workload,
        row.batch,
        row.variant,
        row.precision,
        _status(row, notes),
        _rate(row.throughput, row.unit),
        _tflops(row),
        *(ratio_words(row.speedups.get(baseline)) for baseline in baselines),
        *(quantity.written(row) for quantity in derived),
        parity_words(row.parity),
        target_words(row.time_to_target),
    ]


def _across(report: Report, labels: dict[str, str]) -> Section:
    machines = [m.id for m in report.machines]
    cells: dict[tuple[str, str], dict[str, SummaryRow]] = {}
    for row in report.rows:
        cells.setdefault((row.setup, row.precision), {})[row.machine] = row
    rows = []
    for found in cells.values():
        first = next(iter(found.values()))
        shown = [_across_cell(found.get(m), report.baseline) for m in machines]
        rows.append([first.matrix, first.workload, first.batch, first.variant, first.precision, *shown])
    intro = f"Speedup against {report.baseline} (and throughput) per machine; machines are never merged."
    headers = ("matrix", "workload", "batch", "variant", "precision", *(labels[m] for m in machines))
    return Section("Across machines", intro, headers, rows)


def _largest_batches(report: Report, labels: dict[str, str]) -> Section:
    searched = [r for r in report.rows if r.max_batch]
    derived = shown(REPORT, searched, LARGEST_BATCH)
    rows = [
        [labels[r.machine], r.matrix, r.workload, r.variant, r.precision, r.batch,
         *(q.written(r) for q in derived), _rate(r.throughput, r.unit)]
        for r in searched
    ]  # fmt: skip
    intro = (
        "With batch_sizes auto, each precision ran at the largest batch that fitted in device memory (probed in"
        " fresh processes, to within 1/16); 'vs fp32' is how much larger a batch it fits than fp32."
    )
    headers = ("machine", "matrix", "workload", "variant", "precision", "largest batch", *(q.header for q in derived),
               "throughput")  # fmt: skip
    return Section("Largest batch that fits", intro, headers, rows)


def _data_parallel(report: Report, labels: dict[str, str]) -> Section:
    ddp = [row for row in report.rows if row.world_size is not None]
    derived = shown(REPORT, ddp, DATA_PARALLEL)
    rows = [_ddp_cells(row, labels[row.machine], derived) for row in ddp]
    intro = (
        "DDP cells: every rank at the listed batch (weak scaling), throughput over all ranks. Communication share:"
        " 1 - (step without gradient sync) / (step with it), same batches. Scaling efficiency: throughput / (world"
        " size x world size 1's). World parity: against world size 1; hook: against plain float32 all-reduce."
    )
    headers = ("machine", "matrix", "workload", "batch/rank", "precision", "world", "hook", "status", "throughput",
               *(q.header for q in derived), "parity vs world 1", "hook parity")  # fmt: skip
    return Section("Data-parallel (DDP)", intro, headers, rows)


def _ddp_cells(row: SummaryRow, label: str, derived: Sequence[Derived]) -> list[str]:
    return [
        label,
        row.matrix,
        row.workload,
        row.batch,
        row.precision,
        str(row.world_size),
        row.comm_hook or "none",
        row.status + (", noisy" if row.noisy else ""),
        _rate(row.throughput, row.unit),
        *(quantity.written(row) for quantity in derived),
        verdict_words(row.world_parity),
        verdict_words(row.hook_parity),
    ]


def _bound_cells(row: SummaryRow, shown: bool) -> list[str]:
    if not shown:
        return []
    return [row.bound.words() if row.bound else "-", ratio_words(row.gpu_work_ratio)]


def _across_cell(row: SummaryRow | None, baseline: str) -> str:
    if row is None:
        return "not run"
    if row.throughput is None:
        return row.status
    over = row.speedups.get(baseline)
    return f"{times(over and over.value)} ({_rate(row.throughput, row.unit)})"


def _references(report: Report, labels: dict[str, str]) -> Section:
    """The references a run matched, one row each; those that need another GPU, in one line."""
    matched = [r for r in report.references if r.verdict != NO_MATCHING_RUN]
    rows = [
        [r.id + (" (community figure, one run)" if r.community else ""), r.gpu, r.precision, r.metric,
         _figure(r.published, r.unit),
         "-" if r.measured is None else _figure(r.measured, r.unit),
         "-" if r.estimated is None else _figure(r.estimated, r.unit), labels.get(r.machine, "-") if r.machine else "-",
         r.verdict, r.why]
        for r in matched
    ]  # fmt: skip
    unmatched = [r for r in report.references if r.verdict == NO_MATCHING_RUN and not r.needs]
    beyond = [r for r in report.references if r.needs]
    notes = []
    if unmatched:
        needs: dict[str, dict[str, None]] = {}  # model -> the GPUs its figures were measured on, in order
        for r in unmatched:
            needs.setdefault(r.model, {})[r.gpu] = None
        community = {r.model for r in unmatched if r.community}
        wanted = "; ".join(
            f"{model} on {', '.join(gpus)}" + (" (community figures)" if model in community else "")
            for model, gpus in needs.items()
        )
        notes.append(f"{len(unmatched)} published figure(s) have no matching run here; they need a run of {wanted}.")
    if beyond:
        what = "; ".join(dict.fromkeys(f"{r.model}: {r.needs}" for r in beyond))
        notes.append(f"{len(beyond)} published figure(s) are out of a short matrix's reach ({what}).")
    intro = (
        "Published figures, judged only against runs on the same GPU model with the configuration they were"
        " measured with; a kernel benchmark's figure is also shown beside its program run on another GPU or"
        " rehearsed on a CPU, not judged. Sources are in the reference data (amp_suite/references/); a community"
        " figure is one run someone posted, not a vendor's table. Estimated: what amp-suite predict estimates for"
        " the published configuration on the publisher's GPU, where it estimates it (a kernel benchmark's figures)."
    )
    headers = ("reference", "GPU", "precision", "metric", "published", "measured", "estimated", "machine", "verdict",
               "why")  # fmt: skip
    return Section("Published references", intro, headers, rows, notes)


def _estimated(report: Report) -> Section:
    """The roofline's estimates beside what the records measured on the same GPU (`amp-suite predict
    --results`), with the error of each and the mean."""
    rows = [
        [e.gpu, e.workload, str(e.batch), e.precision, _step_ms(e.measured_step_ms), _step_ms(e.step_ms),
         f"vs {e.baseline}", times(e.measured), times(e.estimated), "-" if e.error is None else f"{e.error:+.0%}",
         e.bound, ", ".join(e.dominant)]
        for e in report.estimated
    ]  # fmt: skip
    error = mean_absolute_error(report.estimated)
    counted = sum(e.error is not None for e in report.estimated)
    notes = [f"Mean |estimated / measured - 1| on {counted} speedup(s): {error:.0%}."] if error is not None else []
    intro = (
        "What a roofline of each training step, op by op, estimated for the GPU these records ran on (amp-suite"
        " predict --results), beside what they measured. On the GPU each op takes the longer of its FLOPs over the"
        " mode's peak and its bytes over the memory bandwidth (a compiled cell's ops fused as Inductor fuses"
        " them); the host launches every kernel at its cost per kernel, ahead of the GPU; a step takes the slower"
        " of the two sides (bound 'host' where the launches do). What it leaves out (a step's start before the"
        " queue fills, caches, kernels below their peak) is where it errs."
    )
    headers = ("GPU", "workload", "batch", "mode", "step ms, measured", "step ms, estimated", "speedup", "measured",
               "estimated", "error", "bound", "dominant ops")  # fmt: skip
    return Section("Estimated against measured", intro, headers, rows, notes)


def _step_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _claims(report: Report, labels: dict[str, str]) -> Section:
    """The claims judged on each machine; those its records cannot judge, in one line per machine."""
    judged = [c for c in report.claims if c.verdict != NOT_MEASURED]
    rows = [[CLAIMS[c.claim][0], labels.get(c.machine, c.machine), c.verdict, c.evidence] for c in judged]
    notes = []
    for machine in dict.fromkeys(c.machine for c in report.claims):
        unjudged = [
            CLAIMS[c.claim][0].rstrip(".") for c in report.claims if c.machine == machine and c.verdict == NOT_MEASURED
        ]
        if unjudged:
            notes.append(f"Not measurable on {labels.get(machine, machine)}: {'; '.join(unjudged)}.")
    thresholds = ", ".join(f"{k} {v}" for k, v in report.thresholds.items())
    intro = (
        f"Each claim of the article \u201c{ARTICLE}\u201d, and torchao's about fp8, judged per machine from its"
        " records."
        f" Thresholds: {thresholds}."
    )
    return Section("The article's claims", intro, ("claim", "machine", "verdict", "evidence"), rows, notes)




def without_empty_columns(section: Section, keep: int) -> Section:
    """The section without the columns every row leaves empty ("-"), past the first `keep`."""
    if not section.rows:
        return section
    shown = [i for i in range(len(section.headers)) if i < keep or any(row[i] not in ("-", "") for row in section.rows)]
    return replace(
        section, headers=[section.headers[i] for i in shown], rows=[[row[i] for i in shown] for row in section.rows]
    )


# -- cells -----------------------------------------------------------------------------------


def _status(row: SummaryRow, notes: dict[str, int]) -> str:
    """The status, with its reason as a numbered note (a skip reason repeats on many rows), and
    whether its throughput was noisy."""
    noisy = f", noisy (spread {row.spread:.0%})" if row.noisy and row.spread is not None else ", noisy" * row.noisy
    if row.noisy and row.bound is not None and row.bound.host_bound:  # the host's jitter, not a moving machine
        noisy = noisy.replace("noisy", "host jitter")
    status = row.status + noisy + (", throttled" if row.throttled else "")
    for window in row.set_aside:  # a hiccup's window, left out of its figures: a numbered note
        status += f" [{notes.setdefault(f'{row.workload} {row.precision}: {window}', len(notes) + 1)}]"
    if not row.reason:
        return status
    return f"{status} [{notes.setdefault(row.reason, len(notes) + 1)}]"


def _rate(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:,.1f} {unit}"


def _figure(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if abs(value) >= 1000 else f"{value:.4g} {unit}"


def _tflops(row: SummaryRow) -> str:
    if row.tflops is None:
        return "-"
    return f"{row.tflops:.3g}" + (f" ({row.mfu:.0%})" if row.mfu is not None else "")


# -- formats ---------------------------------------------------------------------------------


def to_markdown(report: Report, figures: Sequence[Figure]) -> str:
    """Every piece of text passes through markdown_cell: names, reasons and sources come from
    records and users, and must not end a line (a heading), a cell (a pipe) or become HTML."""
    lines = ["# amp-suite report", "", markdown_cell(_header(report)), ""]
    lines += [f"> note: {markdown_cell(note)}\n" for note in report.notes]
    for section in sections(report):
        lines += [f"## {markdown_cell(section.title)}", "", markdown_cell(section.intro), ""]
        if section.rows:  # a section that is all notes ("no matching run here") has no table
            lines.append("| " + " | ".join(markdown_cell(header) for header in section.headers) + " |")
            lines.append("|" + "---|" * len(section.headers))
            lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in section.rows]
            lines.append("")
        lines += [f"{markdown_cell(note)}  " for note in section.notes]
        lines += [""] if section.notes else []
    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{_alt(figure.title)}](figures/{figure.name})\n" for figure in figures]
    return "\n".join(lines)


def _alt(text: str) -> str:
    """An image's alt text ends at its first "]"."""
    return markdown_cell(text).replace("[", "\\[").replace("]", "\\]")


def to_html(report: Report, figures: Sequence[Figure]) -> str:
    from jinja2 import Environment, PackageLoader, select_autoescape

    environment = Environment(
        loader=PackageLoader("amp_suite.report"),
        autoescape=select_autoescape(["html", "j2"]),
        # No ESC, BEL or bidi overrides in any string; markup the filters made is theirs, made safe there.
        finalize=lambda value: printable(value) if isinstance(value, str) and not isinstance(value, Markup) else value,
    )
    environment.filters["code"] = code_spans
    environment.filters["verdict_class"] = verdict_class
    environment.filters["number_class"] = number_class
    environment.filters["prose_class"] = prose_class
    images = [(f.title, "data:image/png;base64," + base64.b64encode(f.png).decode("ascii")) for f in figures]
    return environment.get_template("report.html.j2").render(
        header=_header(report), notes=report.notes, sections=sections(report), figures=images
    )


def verdict_classes() -> dict[str, str]:
    """The words a cell may start with that say how it went, each declared where it is decided, and
    the verdict each names: a parity verdict by its words (analysis.words), the others as they are."""
    named = (*get_args(ClaimVerdict), *get_args(ReferenceVerdict), *get_args(Status))
    return {
        **{word: word for word in named},
        **{word: verdict for verdict, word in words.PARITY_WORDS.items()},
        **{f"accuracy {word}": f"accuracy {word}" for word in get_args(Accuracy)},
        words.AT_RISK_FLAG: "at risk",
    }


def verdict_class(cell: str) -> str:
    """A CSS class for a cell that starts with a verdict or status ("fail (-0.87 / 0.02)"), else ""."""
    classes = verdict_classes()
    word = next((w for w in classes if cell == w or cell.startswith((w + " (", w + " [", w + ",", w + " "))), None)
    return "" if word is None else classes[word].replace(" ", "-")


CODE_SPAN = re.compile(r"`([^`]+)`")


def code_spans(text: str) -> Markup:
    """The text escaped, with its `code spans` (a matrix key, a command) as <code>, as Markdown shows them."""
    return Markup(CODE_SPAN.sub(r"<code>\1</code>", str(escape(printable(text)))))


NUMBER = re.compile(r"[-+]?\d[\d,.]*(x|%|\b)")


def number_class(cell: str) -> str:
    """The class "num" for a cell that is a figure ("1.23x [1.1, 1.4]", "27,225.1 tokens/s", "-"): right-aligned."""
    return "num" if cell == "-" or NUMBER.match(cell) else ""


PROSE_CHARS = 60  # a cell this long is a sentence (a claim, a reason, evidence): it wraps


def prose_class(cell: str) -> str:
    """The class "prose" for a sentence-long cell: it wraps, at a readable width, where the first
    column (labels, kept on one line) would otherwise stretch across the page."""
    return "prose" if len(cell) > PROSE_CHARS else ""


def _header(report: Report) -> str:
    unread = f", {report.unreadable} unreadable" if report.unreadable else ""
    return (
        f"{report.records} records{unread} from {', '.join(report.sources) or 'no source'};"
        f" {len(report.machines)} machine(s); speedups against {report.baseline}."
        f" Generated {report.generated_at} by amp-suite {report.suite_version}."
    )


def _write(path: Path, text: str) -> Path:
    return write_whole(path, text.encode("utf-8"))  # a reader never sees half a report
