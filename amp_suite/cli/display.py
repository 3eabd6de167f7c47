"""Terminal output: progress over cells and steps, a line per finished cell, the summary table."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from amp_suite.analysis.answer import Answer
from amp_suite.analysis.outcome import Outcome
from amp_suite.analysis.summary import SummaryRow, natural_throughput
from amp_suite.config import CellSpec
from amp_suite.records.results import CellRecord
from amp_suite.text import plain, printable

STATUS_STYLE = {"ok": "green", "skipped": "yellow", "failed": "red", "diverged": "magenta", "oom": "red"}


class RichDisplay:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            # Each refresh renders every bar: about 3 ms of a core on a slow 2-core VM, where the
            # refresh thread competes with the cell's threads (at rich's default 10 Hz it took 3% of
            # a core in a terminal). Once a second is as often as the elapsed time changes, and where
            # nothing is shown (not a terminal: the bars are transient) it never needs to run.
            refresh_per_second=1,
            auto_refresh=console.is_terminal,
        )
        self.cells_task = self.progress.add_task("cells", total=None)
        self.running: dict[str, tuple[TaskID, str]] = {}  # cell id -> (its steps bar, its label)

    def __enter__(self) -> RichDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def begin(self, to_run: int, reused: int) -> None:
        if reused:
            self.console.print(f"--resume: {reused} cell(s) already ok in results.jsonl; running {to_run}.")
        self.progress.update(self.cells_task, total=to_run)

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {plain(message)}", highlight=False, soft_wrap=True)

    def start_cell(self, spec: CellSpec, where: str | None = None) -> None:
        """A bar per running cell (several at once with --gpus or --ray, each saying where it runs)."""
        label = f"  {plain(spec.cell_id)}" + (f" {plain(f'[{where}]')}" if where else "")
        self.running[spec.cell_id] = (self.progress.add_task(f"{label} starting", total=None), label)

    def cell_progress(self, spec: CellSpec, phase: str, done: int, total: int) -> None:
        task, label = self.running[spec.cell_id]
        self.progress.update(task, description=f"{label} {plain(phase)}", completed=done, total=total)

    def finish_cell(self, record: CellRecord) -> None:
        self.progress.advance(self.cells_task)
        task, _ = self.running.pop(record.cell_id)
        self.progress.remove_task(task)
        style = STATUS_STYLE[record.status]
        rate, unit = natural_throughput(record)
        detail = f"{rate:,.1f} {unit}" if rate is not None else ""
        reason = f"  ({plain(record.reason)})" if record.reason else ""
        self.console.print(f"[{style}]{record.status:>7}[/] {plain(record.cell_id)}  {detail}{reason}", highlight=False)


SUMMARY_COLUMNS = (
    "workload", "batch", "variant", "precision", "status", "throughput", "vs fp32", "peak MB", "mem vs fp32",
)  # fmt: skip
METRIC_LABELS = {"val_accuracy": "acc", "val_perplexity": "ppl"}
PARITY_STYLE = {"pass": "green", "fail": "red", "indicative": "cyan"}


def print_summary(console: Console, rows: Sequence[SummaryRow], title: str, memory_kind: str | None) -> None:
    """One summary table per machine (their rows are never pooled); skip/failure reasons are
    numbered notes under the tables, each printed once."""
    notes: dict[str, int] = {}
    machines = list(dict.fromkeys(row.machine for row in rows))
    for machine in machines:
        table = _summary_table(
            [row for row in rows if row.machine == machine], plain(f"{title} on {machine}"), memory_kind, notes
        )
        console.print(table)
    for reason, number in notes.items():
        console.print(f"  [{number}] {printable(reason)}", highlight=False, markup=False)


def _summary_table(rows: Sequence[SummaryRow], title: str, memory_kind: str | None, notes: dict[str, int]) -> Table:
    with_tf32 = any(row.speedup_vs_tf32 is not None and row.precision != "tf32" for row in rows)
    columns = SUMMARY_COLUMNS[:7] + (("vs tf32",) if with_tf32 else ()) + SUMMARY_COLUMNS[7:]
    caption = plain(f"peak memory: {memory_kind}") if memory_kind else None
    table = Table(title=title, title_justify="left", caption=caption)
    for column in columns:
        justify = "left" if column in ("workload", "variant", "precision", "status") else "right"
        table.add_column(column, justify=justify, no_wrap=True)
    table.add_column("validation", justify="right", no_wrap=True)
    table.add_column("parity: delta / tol", no_wrap=True)
    table.add_column("grads < fp16", justify="right", no_wrap=True)
    table.add_column("note")
    for row in rows:
        reference = f"[{notes.setdefault(row.reason, len(notes) + 1)}]" if row.reason else ""
        noisy = "noisy" if row.noisy else ""  # the spread of its windows or of its speedup exceeds 10%
        throttled = "throttled" if row.throttled else ""  # NVML saw a power or thermal slowdown
        note = " ".join(part for part in (reference, noisy, throttled) if part)
        tf32 = (_speedup(row.speedup_vs_tf32, row.speedup_vs_tf32_interval),) if with_tf32 else ()
        table.add_row(
            plain(row.workload),
            plain(row.batch),
            plain(row.variant),
            plain(row.precision),
            f"[{STATUS_STYLE.get(row.status, 'white')}]{plain(row.status)}[/]",
            plain(_number(row.throughput, "{:,.1f} " + row.unit)),
            _speedup(row.speedup, row.speedup_interval),
            *tf32,
            _number(row.peak_memory_mb, "{:,.0f}"),
            _number(row.memory_ratio, "{:.2f}x"),
            _validation(row),
            _parity(row),
            _number(row.grad_underflow_fraction, "{:.1%}"),
            note,
        )
    return table


def _speedup(value: float | None, interval: tuple[float, float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")


ACCURACY_STYLE = {"kept": "", "at risk": "yellow", "lost": "red", "not compared": ""}  # the sentence says which


def print_answer(console: Console, answers: Sequence[Answer], labels: dict[str, str]) -> None:
    """The answer, per machine: a line per comparison; where accuracy is at risk or lost, in colour."""
    several_matrices = len({a.matrix for a in answers}) > 1
    for machine in dict.fromkeys(a.machine for a in answers):
        console.print(f"[bold]The answer on {plain(labels.get(machine, machine))}:[/]", highlight=False)
        for a in (a for a in answers if a.machine == machine):
            matrix = f", {a.matrix}" if several_matrices else ""
            where = plain(f"{a.workload} (batch {a.batch}, {a.variant}{matrix})")
            style = ACCURACY_STYLE[a.accuracy]
            sentence = f"[{style}]{plain(a.sentence)}[/]" if style else plain(a.sentence)
            console.print(f"  [bold]{where}[/]: {sentence}", highlight=False)
            if a.rule_disagrees:
                console.print(f"    [dim]{plain(a.rule_disagrees)}[/]", highlight=False)


def print_outcome(console: Console, outcome: Outcome) -> None:
    """What the exit code means: the expectations that held, and every one that did not."""
    for line in outcome.as_expected:
        console.print(f"  [green]as expected[/]  {plain(line)}", highlight=False)
    if outcome.problems:
        code = int(outcome.exit_code)
        console.print(f"[red]Exit {code} ({outcome.label}):[/]", highlight=False)
        for line in outcome.problems:
            console.print(f"  [red]-[/] {plain(line)}", highlight=False)


def _validation(row: SummaryRow) -> str:
    if row.val_metric is None:
        return "-"
    return plain(f"{METRIC_LABELS.get(row.val_metric_name, row.val_metric_name)} {row.val_metric:.3f}")


def _parity(row: SummaryRow) -> str:
    if row.parity is None:
        return ""
    p = row.parity
    return f"[{PARITY_STYLE[p.verdict]}]{p.verdict}[/] {p.delta:+.3f} / {p.tolerance:.3f}"


def _number(value: float | None, template: str) -> str:
    return "-" if value is None else template.format(value)


RAN_IN_STYLE = {"lower": "green", "promoted": "cyan", "float32": "white", "other": "dim"}


def print_audit(console: Console, audit: dict) -> None:
    """Per-op dtypes of one training step; ops with no floating-point output are left out."""
    title = plain(f"{audit['workload']} / {audit['precision']} on {audit['device']}: one training step")
    table = Table(title=title, title_justify="left")
    for column in ("phase", "op", "calls", "inputs", "outputs", "ran in"):
        table.add_column(column, justify="right" if column == "calls" else "left")
    for op in audit["ops"]:
        if op["ran_in"] == "other":
            continue
        style = RAN_IN_STYLE.get(op["ran_in"].split("+")[0], "white")
        table.add_row(
            plain(op["phase"]), plain(op["op"]), str(op["calls"]), plain(", ".join(op["input_dtypes"])),
            plain(", ".join(op["output_dtypes"])), f"[{style}]{plain(op['ran_in'])}[/]",
        )  # fmt: skip
    console.print(table)
    for check, ok in audit["checks"].items():
        console.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'}  {plain(check.replace('_', ' '))}")
