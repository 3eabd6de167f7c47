"""`amp-suite report`: records of one or many machines in, report.html/md/json out."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from amp_suite.analysis.outcome import ExitCode
from amp_suite.cli.common import MLFLOW_HTTP_DEFAULTS, app, console, fail, folder, say, source, split_names, warn
from amp_suite.config import ConfigError
from amp_suite.config.precisions import REFERENCE, SPEED_BASELINES
from amp_suite.paths import is_folder, shown
from amp_suite.records.rundir import RunDirectory
from amp_suite.tracking.uri import check_tracking_uri

BaselineChoice = Enum("BaselineChoice", {name: name for name in SPEED_BASELINES}, type=str)  # fp32, tf32, bf16


@app.command()
def report(
    sources: Annotated[
        list[str],
        typer.Argument(
            parser=source,
            help="Run folders, results.jsonl files, or MLflow experiment names (with --tracking-uri).",
            show_default=False,
            metavar="SOURCE...",
        ),
    ],
    out: Annotated[
        Optional[Path],
        typer.Option(parser=folder, help="Folder for the report [default: <the run folder>/report, else ./report]"),
    ] = None,
    formats: Annotated[str, typer.Option("--format", help="Comma-separated: html, md, json.")] = "html,md,json",
    baseline: Annotated[
        BaselineChoice, typer.Option(help="What speedups divide by (bf16: what fp8 must beat).")  # type: ignore[valid-type]
    ] = BaselineChoice[REFERENCE],
    references: Annotated[
        Optional[str], typer.Option(help="A shipped reference set's name or a YAML file [default: every shipped set]")
    ] = None,
    tracking_uri: Annotated[
        Optional[str], typer.Option(envvar="MLFLOW_TRACKING_URI", help="MLflow store to read experiments from.")
    ] = None,
) -> None:
    """Tables, figures, published references and the claims of the article "Mixed Precision in PyTorch: What
    autocast Changes and When It Pays Off", judged from records of one or many machines.

    Machines (device model and software stack) are never merged: each is its own column."""
    from amp_suite.cli.display import print_answer
    from amp_suite.report import load_references, make_report
    from amp_suite.report.render import FORMATS
    from amp_suite.report.sources import check_sources, estimates_in, gather

    try:
        chosen = split_names("--format", formats) or []
        unknown = [f for f in chosen if f not in FORMATS]
        if unknown:
            raise ConfigError(f"--format: unknown {[u[:20] for u in unknown[:5]]}; choose from {list(FORMATS)}")
        if tracking_uri is not None:
            check_tracking_uri(tracking_uri)
        check_sources(sources, tracking_uri)
        destination = out or _report_folder(sources)
        RunDirectory.check_writable(destination)
        if (destination / "figures").is_symlink():  # the figures would be written wherever it leads
            raise ConfigError(f"--out {shown(destination)}: figures is a symbolic link; a report stays in its folder")
        published = load_references(references)
        for key, value in MLFLOW_HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        gathered = gather(sources, tracking_uri)
        if not gathered.records:
            raise ConfigError(f"no records in {', '.join(s[:200] for s in sources)}{_unread(gathered)}")
    except ConfigError as exc:
        raise fail(str(exc)) from None
    except ConnectionError as exc:
        raise fail(f"tracking store {tracking_uri} is not usable: {exc}") from None
    estimated, unread = estimates_in(sources)
    for line in unread:
        warn(f"left out of the report: {line}")
    try:
        done, written = make_report(
            gathered.records, published, baseline.value, sources, gathered.unreadable, destination, chosen, estimated
        )
    except OSError as exc:  # e.g. a full disk: each file is written whole or not at all
        raise fail(f"report not written to {destination}: {exc.strerror or exc}", ExitCode.WRITE_FAILED) from None
    verdicts = _counts(c.verdict for c in done.claims)
    matched = _counts(r.verdict for r in done.references)
    say(f"{done.records} records, {len(done.machines)} machine(s): {', '.join(m.label for m in done.machines)}")
    if gathered.unreadable or gathered.repeated:
        skipped = f"{gathered.unreadable} unreadable line(s) or run(s) skipped"
        say(f"{skipped}; {gathered.repeated} duplicate record(s) counted once")
    if gathered.conflicting:
        warn(
            f"{gathered.conflicting} record(s) reuse an earlier record's record_id with other content:"
            " the first was kept, the later ones left out"
        )
    for note in done.notes:
        say(f"note: {note}")
    print_answer(console, done.answer, {m.id: m.label for m in done.machines})
    say(f"claims: {verdicts}; references: {matched}")
    for path in written:
        if path.parent == destination:
            say(f"wrote {path}")


@app.command()
def summary(
    sources: Annotated[
        list[str],
        typer.Argument(
            parser=source, help="Run folders or results.jsonl files.", show_default=False, metavar="RUN_DIR..."
        ),
    ],
) -> None:
    """Reprint the summary tables and the answer from the records, at the terminal's width.

    Reads only results.jsonl: no torch, no MLflow, nothing written."""
    from amp_suite.analysis.conclusion import Conclusion
    from amp_suite.cli.display import print_answer, print_summary
    from amp_suite.report.sources import check_sources, gather

    try:
        check_sources(sources, None)
        gathered = gather(sources, None)
        if not gathered.records:
            raise ConfigError(f"no records in {', '.join(s[:200] for s in sources)}{_unread(gathered)}")
    except ConfigError as exc:
        raise fail(str(exc)) from None
    records = gathered.records
    if gathered.unreadable:
        warn(f"{gathered.unreadable} unreadable line(s) skipped")
    conclusion = Conclusion.of(records)
    kinds = sorted({r.peak_memory_kind for r in records if r.peak_memory_kind})
    print_summary(console, conclusion.rows, f"{len(records)} records", ", ".join(kinds) or None)
    print_answer(console, conclusion.answers, conclusion.labels)


def _unread(gathered) -> str:
    if not gathered.unreadable:
        return ": nothing to report"
    return (
        f": {gathered.unreadable} line(s) or run(s) could not be read as records (for an MLflow store of a moved"
        " folder, `amp-suite ui --out FOLDER` repoints its artifacts first)"
    )


def _report_folder(sources: list[str]) -> Path:
    """A single run folder keeps its report beside its records; anything else writes ./report."""
    if len(sources) == 1 and is_folder(Path(sources[0])):
        return Path(sources[0]) / "report"
    return Path("report")


def _counts(values) -> str:
    from collections import Counter

    return ", ".join(f"{n} {v}" for v, n in Counter(values).items()) or "none"
