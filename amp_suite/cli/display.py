"""Terminal output: progress over cells and steps, a line per finished cell, the summary table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column as TableColumn
from rich.table import Table
from rich.text import Text

from amp_suite.analysis.answer import INCONCLUSIVE, Answer
from amp_suite.analysis.derived import TERMINAL, shown
from amp_suite.analysis.outcome import Outcome
from amp_suite.analysis.quantities import FAIL, INDICATIVE, INVALID, NOT_JUDGED, PASS
from amp_suite.analysis.summary import EAGER, SummaryRow, natural_throughput, other_baselines
from amp_suite.analysis.words import interval_words, parity_parts, ratio_words, times
from amp_suite.config import CellSpec
from amp_suite.config.base import DIVERGED, FAILED, INTERRUPTED, OK, OOM, SKIPPED
from amp_suite.config.precisions import REFERENCE
from amp_suite.execution.pace import SLOW_S, MatrixPace, Pace, step_words, words_for
from amp_suite.records.results import CellRecord
from amp_suite.text import plain, printable

# Not a terminal (a pipe, a log, `docker run` without -t): no bars are drawn, so a running cell says
# where it is in a plain line this often; a forced emulated cell was otherwise silent for 10 minutes.
PIPED_LINE_S = 30.0
STATUS_STYLE = {OK: "green", SKIPPED: "yellow", FAILED: "red", DIVERGED: "magenta", OOM: "red",
                INTERRUPTED: "yellow"}  # fmt: skip


class PaceColumn(ProgressColumn):
    """A bar's pace and time left ("8.1 s/step, ~7:45 left"), counting down between a slow cell's
    messages; the cells' bar: the matrix's steps left (execution.pace). On one line, cut short where
    the terminal is narrow: a wrapped bar takes two rows for every refresh."""

    def __init__(self) -> None:
        super().__init__(table_column=TableColumn(no_wrap=True, overflow="ellipsis"))

    def render(self, task: Task) -> Text:
        pace = task.fields.get("pace")
        return Text(pace.words() if pace is not None else "", style="progress.remaining")


class RichDisplay:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            PaceColumn(),
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
        self.matrix = MatrixPace()
        self.cells_task = self.progress.add_task("cells", total=None, pace=self.matrix)
        self.running: dict[str, tuple[TaskID, str]] = {}  # cell id -> (its steps bar, its label)
        self.estimated: set[str] = set()  # cells whose estimate was printed
        self.lines_at: dict[str, float] = {}  # not a terminal: when each cell's latest plain line was due

    def __enter__(self) -> RichDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def begin(self, to_run: int, reused: int) -> None:
        if reused:
            self.console.print(f"--resume: {reused} cell(s) already ok in results.jsonl; running {to_run}.")
        self.progress.update(self.cells_task, total=to_run)
        self.matrix.unstarted = to_run

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {plain(message)}", highlight=False, soft_wrap=True)

    def start_cell(self, spec: CellSpec, where: str | None = None) -> None:
        """A bar per running cell (several at once with --gpus or --ray, each saying where it runs)."""
        label = f"  {plain(spec.cell_id)}" + (f" {plain(f'[{where}]')}" if where else "")
        pace = Pace(spec.warmup_steps, spec.steps)
        self.running[spec.cell_id] = (self.progress.add_task(f"{label} starting", total=None, pace=pace), label)
        # Cells that differ in seed alone train at one pace: the first's step time estimates the others'.
        self.matrix.add(spec.cell_id, spec.model_copy(update={"seed": 0}).config_hash, pace)

    def cell_progress(self, spec: CellSpec, phase: str, done: int, total: int) -> None:
        task, label = self.running[spec.cell_id]
        pace = self.matrix.paces[spec.cell_id]
        pace.heard(phase, done, total)
        self.matrix.learn(spec.cell_id)
        # Sequential timing's rounds go on past the schedule's steps (cell.windows.timing_rounds).
        shown = "measure, rounds past the schedule" if phase == "measure" and total > spec.steps else phase
        self.progress.update(task, description=f"{label} {plain(shown)}", completed=done, total=total)
        self._estimate(spec, pace)
        self._piped_line(spec, shown, pace)

    def _piped_line(self, spec: CellSpec, shown: str, pace: Pace) -> None:
        """Where no bar is drawn, a running cell's bar as a line, every PIPED_LINE_S."""
        if self.console.is_terminal:
            return
        now = pace.clock()
        if now - self.lines_at.setdefault(spec.cell_id, now) < PIPED_LINE_S:
            return
        self.lines_at[spec.cell_id] = now
        words = pace.words()
        self.console.print(
            f"  {plain(spec.cell_id)} {plain(shown)} {pace.done}/{pace.total}" + (f", {words}" if words else ""),
            highlight=False,
        )

    def _estimate(self, spec: CellSpec, pace: Pace) -> None:
        """Once, as a forced or slow cell's timed steps begin (its first steps timed): what they will
        take. Printed, not drawn: a log or a pipe gets it too."""
        step = pace.step_s
        if step is None or spec.cell_id in self.estimated or pace.cell_left_s() == 0:
            return
        if not spec.force and step * spec.steps < SLOW_S:
            return
        self.estimated.add(spec.cell_id)
        why = "forced" if spec.force else "slow"
        self.console.print(
            f"  {plain(spec.cell_id)} ({why}): ~{step_words(step)} a step, about {words_for(step * spec.steps)}"
            f" for {spec.steps} timed steps; the matrix: {self.matrix.words()}",
            highlight=False,
        )

    def finish_cell(self, record: CellRecord) -> None:
        self.progress.advance(self.cells_task)
        task, _ = self.running.pop(record.cell_id)
        self.progress.remove_task(task)
        self.matrix.ended(record.cell_id)
        style = STATUS_STYLE[record.status]
        rate, unit = natural_throughput(record)
        detail = f"{rate:,.1f} {unit}" if rate is not None else ""
        reason = f"  ({plain(record.reason)})" if record.reason else ""
        self.console.print(f"[{style}]{record.status:>7}[/] {plain(record.cell_id)}  {detail}{reason}", highlight=False)


PARITY_STYLE = {PASS: "green", FAIL: "red", INDICATIVE: "cyan", INVALID: "bold red", NOT_JUDGED: "yellow"}


def print_summary(console: Console, rows: Sequence[SummaryRow], title: str, memory_kind: str | None) -> None:
    """One summary table per machine (their rows are never pooled); skip/failure reasons are
    numbered notes under the tables, each printed once."""
    notes: dict[str, int] = {}
    machines = list(dict.fromkeys(row.machine for row in rows))
    for machine in machines:
        mine = [row for row in rows if row.machine == machine]
        columns = _summary_columns(mine, notes)
        shown = fit(columns, console.width)
        left_out = [column.header for column in columns if column not in shown]
        caption = "; ".join(
            ([f"peak memory: {memory_kind}"] if memory_kind else [])
            + ([f"left out at {console.width} columns: {', '.join(left_out)} (amp-suite report has every one)"]
               if left_out else [])
        )  # fmt: skip
        table = Table(title=plain(f"{title} on {machine}"), title_justify="left", caption=plain(caption) or None)
        for column in shown:
            table.add_column(column.header, justify="right" if column.right else "left", no_wrap=True)
        for index in range(len(mine)):
            table.add_row(*(column.cells[index] for column in shown))
        console.print(table)
    for reason, number in notes.items():
        console.print(f"  [{number}] {printable(reason)}", highlight=False, markup=False)


@dataclass(frozen=True, eq=False)
class Column:
    header: str
    cells: list[str]  # rich markup, one per row
    keep: int  # the narrower the terminal, the sooner a column with a lower value is left out
    right: bool = True  # numbers are right-aligned

    @cached_property
    def width(self) -> int:
        return max([cell_len(self.header), *(Text.from_markup(cell).cell_len for cell in self.cells)])


def fit(columns: Sequence[Column], width: int) -> list[Column]:
    """The columns that fit in `width` whole: the least needed are left out, no cell is ever cut."""
    shown = list(columns)
    while len(shown) > 1 and 1 + sum(column.width + 3 for column in shown) > width:  # padding and a border each
        shown.remove(min(shown, key=lambda column: column.keep))
    return shown


def _summary_columns(rows: Sequence[SummaryRow], notes: dict[str, int]) -> list[Column]:
    """Every column, with how much it is needed: the cell (workload and, where not eager, how it
    ran), its precision and status, then the speedup, the declared quantities, parity, the rest."""
    with_target = any(row.time_to_target is not None for row in rows)
    bounds = any(row.bound is not None for row in rows)  # GPU rows; a CPU's tables keep their columns
    others = other_baselines(rows, REFERENCE)
    derived = shown(TERMINAL, rows)  # the declared quantities (analysis.derived), in their order
    return [  # left to right as read; `keep` says which go first when the terminal is narrow
        Column("workload", [plain(_cell(row, rows)) for row in rows], 100, right=False),
        Column("batch", [plain(row.batch) for row in rows], 45),
        Column("precision", [plain(row.precision) for row in rows], 100, right=False),
        Column("status", [_status(row, notes) for row in rows], 99, right=False),
        Column("throughput", [plain(_number(row.throughput, "{:,.1f} " + row.unit)) for row in rows], 90),
        Column(f"vs {REFERENCE}", [ratio_words(row.speedup) for row in rows], 98),
        *(Column(f"vs {b}", [ratio_words(r.speedups.get(b)) for r in rows], 20) for b in others),
        *(Column(q.title(TERMINAL), [escape(plain(q.written(r))) for r in rows], q.keep) for q in derived),
        Column("validation", [_validation(row) for row in rows], 50),
        Column("parity: delta / margin", [_parity(row) for row in rows], 97, right=False),
        *([Column("to target", [_to_target(row) for row in rows], 85)] if with_target else []),
        *([Column("bound", [_bound(row) for row in rows], 95, right=False)] if bounds else []),
    ]  # fmt: skip


def _cell(row: SummaryRow, rows: Sequence[SummaryRow]) -> str:
    """The cell as "resnet" or "mlp, compiled (default)"; with the matrix where the rows come from several."""
    matrix = f" ({row.matrix})" if len({r.matrix for r in rows}) > 1 else ""
    return row.workload + ("" if row.variant == EAGER else f", {row.variant}") + matrix


def _bound(row: SummaryRow) -> str:
    """"host-bound 86% idle" where the GPU's work was traced; "host-bound (MFU)" where inferred."""
    if row.bound is None:
        return "-"
    if row.bound.measured and row.bound.idle_fraction is not None:
        return f"{row.bound.bound} {row.bound.idle_fraction:.0%} idle"
    return f"{row.bound.bound} (MFU)"


def _status(row: SummaryRow, notes: dict[str, int]) -> str:
    """The status, its reason as a numbered note (printed once under the tables), and whether its
    throughput was noisy (the spread of its windows or of its speedup beyond 10%) or the GPU throttled.
    A host-bound row's spread is the host's jitter, not a noisy machine (analysis.bound)."""
    reference = f"[{notes.setdefault(row.reason, len(notes) + 1)}]" if row.reason else ""
    noisy = f"noisy {row.spread:.0%}" if row.spread is not None else "noisy"  # the spread it measured
    if row.bound is not None and row.bound.host_bound:
        noisy = f"host jitter {row.spread:.0%}" if row.spread is not None else "host jitter"
    for window in row.set_aside:  # a hiccup's window, left out of its figures: said once, under the table
        reference += f"[{notes.setdefault(f'{row.workload} {row.precision}: {window}', len(notes) + 1)}]"
    aside = f"{len(row.set_aside)} set aside"  # windows: the notes say which and why
    flagged = ((noisy, row.noisy), ("throttled", row.throttled), (aside, row.set_aside))
    flags = ", ".join(flag for flag, on in flagged if on)
    text = " ".join(part for part in (row.status + (f", {flags}" if flags else ""), reference) if part)
    return f"[{STATUS_STYLE.get(row.status, 'white')}]{escape(plain(text))}[/]"


# The sentence says which; "not judged": fp32 learned nothing, so the answer is about speed alone.
ACCURACY_STYLE = {"kept": "", "at risk": "yellow", "lost": "red", "not compared": "", "not judged": "yellow"}


def print_answer(console: Console, answers: Sequence[Answer], labels: dict[str, str]) -> None:
    """The answer, per machine: a line per comparison; where it is inconclusive, or accuracy is at risk
    or lost, in colour."""
    several_matrices = len({a.matrix for a in answers}) > 1
    for machine in dict.fromkeys(a.machine for a in answers):
        console.print(f"[bold]The answer on {plain(labels.get(machine, machine))}:[/]", highlight=False)
        for a in (a for a in answers if a.machine == machine):
            matrix = f", {a.matrix}" if several_matrices else ""
            where = plain(f"{a.workload} (batch {a.batch}, {a.variant}{matrix})")
            style = "yellow" if a.verdict == INCONCLUSIVE else ACCURACY_STYLE[a.accuracy]
            sentence = f"[{style}]{plain(a.sentence)}[/]" if style else plain(a.sentence)
            console.print(f"  [bold]{where}[/]: {sentence}", highlight=False)
            for note in (a.rule_note, a.timed):
                if note:
                    console.print(f"    [dim]{plain(note)}[/]", highlight=False)


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
    return plain(f"{row.val_metric_label} {row.val_metric:.3f}")


def _parity(row: SummaryRow) -> str:
    if row.parity is None:
        return ""
    flag, word, rest = parity_parts(row.parity)
    style = PARITY_STYLE[row.parity.verdict]
    if row.parity.verdict in (INVALID, NOT_JUDGED):  # nothing was compared: the whole cell in the verdict's style
        return f"[{style}]{plain(word + rest)}[/]"
    # One seed, its delta beyond the tolerance: no verdict, but not to be read as a pass either.
    return (f"[bold yellow]{plain(flag)}[/] " if flag else "") + f"[{style}]{plain(word)}[/]{plain(rest)}"


def _to_target(row: SummaryRow) -> str:
    """Speedup to the target against fp32 (its interval), or on how many seeds it was reached."""
    reach = row.time_to_target
    if reach is None:
        return ""
    if not reach.reached:
        return f"[red]never ({reach.counted})[/]"
    shown = times(reach.speedup) + (interval_words(reach.speedup_interval) if reach.speedup is not None else "")
    return f"{shown} ({reach.counted})" if reach.all_reached else f"{shown} [yellow]({reach.counted})[/]"


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
