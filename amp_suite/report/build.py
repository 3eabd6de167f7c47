"""Records in, the report's content out: machines, rows, references and claims. No torch here.

Everything is recomputed from the records (and the reference data): nothing is read from a log
line or a tracker. Machines are kept apart by their key (amp_suite.records.machine); rows of one machine
pool its hosts and say how many.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, Field

import amp_suite
from amp_suite.analysis.answer import Answer
from amp_suite.analysis.conclusion import Conclusion
from amp_suite.analysis.quantities import INDICATIVE
from amp_suite.analysis.summary import (
    BASELINE,
    BASELINES,
    SummaryRow,
    machine_key,
    natural_throughput,
    setup_key,
)
from amp_suite.analysis.words import PARITY_WORDS
from amp_suite.config.precisions import FP8_MODES, TF32_BASELINE
from amp_suite.config.workloads import WORKLOAD_CONFIG_BY_NAME
from amp_suite.records.machine import Machine
from amp_suite.records.results import CellRecord, utc_now
from amp_suite.records.schema import fields_of, topic_of, unit_of
from amp_suite.report.claims import ClaimResult, Evidence, judge_claims, thresholds_dict
from amp_suite.report.prediction import Estimated
from amp_suite.report.references import Reference, ReferenceResult, match_references, with_estimates


class MachineEntry(BaseModel):
    id: str  # short, stable: what rows, references and claims refer to
    label: str  # a column heading: device model (and compute capability)
    key: str  # device model and software stack: what must match for records to pool
    device_type: str
    device_name: str
    compute_capability: str | None
    driver: str | None
    cuda: str | None
    torch: str | None
    hosts: list[str]  # the hosts pooled into this machine
    records: int


class CellMeasures(BaseModel):
    """One record's measured quantities: every field the record schema declares measured that it has."""

    machine: str  # a machine id
    cell_id: str
    status: str
    measured: dict[str, float]  # throughput in the workload's own unit, as every table gives it
    throughput_unit: str = "samples/s"


class Report(BaseModel):
    generated_at: str
    suite_version: str
    baseline: str  # the speed baseline the tables lead with: fp32, tf32 or bf16 (rows carry every one's speedup)
    sources: list[str]
    invocations: list[str]  # the `amp-suite run`s whose records it covers
    records: int
    unreadable: int  # lines or runs that could not be read as records
    thresholds: dict[str, float]  # the claims' thresholds
    machines: list[MachineEntry]
    answer: list[Answer]  # per machine and comparison: the mode to train in, and why (amp_suite.analysis.answer)
    rows: list[SummaryRow]  # the summary's rows as they are, each machine by its id
    references: list[ReferenceResult]
    claims: list[ClaimResult]
    cells: list[CellMeasures] = Field(default_factory=list)  # each record's measured quantities
    units: dict[str, str] = Field(default_factory=dict)  # of each quantity in `cells`, as the schema declares
    topics: dict[str, str] = Field(default_factory=dict)  # of each quantity in `cells`: speed, timing, memory, ...
    notes: list[str] = Field(default_factory=list)  # what a reader would otherwise have to guess
    estimated: list[Estimated] = Field(default_factory=list)  # `amp-suite predict --results`: estimate vs measured


# The reference workloads whose config declares them matmul-heavy: what the tensor-core claim is
# judged on, with the user's workloads that say so or measure so (_matmul_heavy).
MATMUL_HEAVY_WORKLOADS = tuple(
    name for name, known in WORKLOAD_CONFIG_BY_NAME.items() if known.reference and known.matmul_heavy
)
# A model not shipped with the suite counts as matmul-heavy from this share of its step's arithmetic
# in matmuls, convolutions and attention (records' matmul_flop_share).
MATMUL_HEAVY_SHARE = 0.95


def build_report(
    records: Sequence[CellRecord],
    references: Sequence[Reference],
    baseline: str = BASELINE,
    sources: Sequence[str] = (),
    unreadable: int = 0,
    estimated: Sequence[Estimated] = (),
    conclusion: Conclusion | None = None,
) -> Report:
    """`conclusion`: the records' own, where the caller has it (a run's); else worked out here."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}")
    conclusion = conclusion or Conclusion.of(records)
    summary = conclusion.rows
    objects = conclusion.machines
    machines = _machines(records, objects)
    ids = {key: entry.id for key, entry in machines.items()}
    configs = _workload_configs(records)
    by_setup: dict[tuple[str, str], list[CellRecord]] = {}
    for record in records:
        by_setup.setdefault((machine_key(record), setup_key(record)), []).append(record)
    heavy = {place: config for place, config in configs.items() if _matmul_heavy(config, by_setup[place])}
    evidence = {
        ids[key]: Evidence(
            machine=machine,
            rows=[row for row in summary if row.machine == key],
            answers=conclusion.answers_on(key),
            records=[r for r in records if machine_key(r) == key],
            matmul_heavy=frozenset(s for k, s in heavy if k == key),
            matmul_heavy_workloads=_heavy_names(heavy, by_setup, key),
        )
        for key, machine in objects.items()
    }
    return Report(
        generated_at=utc_now(),
        suite_version=amp_suite.__version__,
        baseline=baseline,
        sources=list(sources),
        invocations=sorted({r.invocation_id for r in records if r.invocation_id}),
        records=len(records),
        unreadable=unreadable,
        thresholds=thresholds_dict(),
        machines=list(machines.values()),
        answer=[replace(a, machine=ids[a.machine]) for a in conclusion.answers],
        rows=[replace(row, machine=ids[row.machine]) for row in summary],
        references=with_estimates(match_references(list(references), objects, summary, configs, ids), list(references)),
        claims=judge_claims(evidence),
        **_cells(records, ids),
        notes=_notes(summary, baseline),
        estimated=list(estimated),
    )


def _cells(records: Sequence[CellRecord], ids: dict[str, str]) -> dict[str, Any]:
    """Every record's measured quantities, and their units: what a new measured field adds to the
    report without an edit here."""
    names = fields_of(CellRecord, role="measured")
    cells = []
    for record in records:
        measured = {name: value for name in names if (value := getattr(record, name)) is not None}
        throughput, unit = natural_throughput(record)
        if throughput is not None:
            measured["throughput"] = throughput
        cell = CellMeasures(
            machine=ids[machine_key(record)], cell_id=record.cell_id, status=record.status, measured=measured,
            throughput_unit=unit,
        )  # fmt: skip
        cells.append(cell)
    shown = {name for cell in cells for name in cell.measured}
    units = {name: unit_of(CellRecord, name) or "" for name in names if name in shown}
    units |= {"throughput": ""} if "throughput" in units else {}  # each cell's own: images/s, tokens/s, ...
    topics = {name: topic_of(CellRecord, name) or "" for name in units}
    return {"cells": cells, "units": units, "topics": topics}


def _notes(summary: list[SummaryRow], baseline: str) -> list[str]:
    """What a reader would otherwise have to guess from empty columns, or miss in a verdict."""
    notes = []
    single = [row for row in summary if row.parity is not None and row.parity.verdict == INDICATIVE]
    if single:
        notes.append(
            f"{len(single)} of {sum(row.parity is not None for row in summary)} comparisons with fp32 rest on one"
            f" seed: their parity is only {PARITY_WORDS[INDICATIVE]}, and their speedups' intervals see the windows of"
            " one run, not how runs differ. `repeats: 3` in the matrix gives verdicts."
        )
    if any(row.precision in FP8_MODES and row.mfu is not None for row in summary):
        notes.append(
            "fp8 rows' MFU divides by the GPU's float8 peak, though only their converted linear layers multiply"
            " in float8; attention, normalisation and layers left out run at bf16's rate, so two peak rates mix"
            " in one step and the figure understates how busy the GPU was."
        )
    if baseline != BASELINE and not any(r.precision == baseline and r.runs for r in summary):
        needs = " (tf32 needs compute capability 8.0+)" if baseline == TF32_BASELINE else ""
        notes.append(f"no {baseline} run finished{needs}: every speedup against {baseline} is empty")
    return notes


def _machines(records: Sequence[CellRecord], objects: dict[str, Machine]) -> dict[str, MachineEntry]:
    hosts: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for record in records:
        key = machine_key(record)
        counts[key] = counts.get(key, 0) + 1
        if record.machine and record.machine.host:
            hosts.setdefault(key, set()).add(record.machine.host)
    entries = {}
    labels = _labels(objects)
    for key, count in counts.items():
        machine = objects.get(key)
        label = labels.get(key, key)
        entries[key] = MachineEntry(
            id=_machine_id(label, key),
            label=label,
            key=key,
            device_type=machine.device_type if machine else "unknown",
            device_name=machine.device_name if machine else "unknown",
            compute_capability=machine.compute_capability if machine else None,
            driver=machine.driver if machine else None,
            cuda=machine.cuda if machine else None,
            torch=machine.torch if machine else None,
            hosts=sorted(hosts.get(key, ())),
            records=count,
        )
    return entries


def _labels(objects: dict[str, Machine]) -> dict[str, str]:
    """Each machine's label, with the stack that tells it apart where two share a device model."""
    labels = {key: machine.label for key, machine in objects.items()}
    for key, machine in objects.items():
        twins = [other for other in objects.values() if other.label == machine.label and other is not machine]
        if twins:
            stack = ("driver", "cuda", "torch")
            differing = [f for f in stack if any(getattr(twin, f) != getattr(machine, f) for twin in twins)]
            labels[key] += ", " + ", ".join(f"{field} {getattr(machine, field)}" for field in differing)
    return labels


def _machine_id(label: str, key: str) -> str:
    """A slug of the label plus a short hash of the key: stable, and distinct for every key."""
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:40]
    return f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:6]}"


def _workload_configs(records: Sequence[CellRecord]) -> dict[tuple[str, str], dict[str, Any]]:
    """(machine key, setup) -> the workload config that setup ran, with the cell's compile mode and layout."""
    configs: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        workload = record.config.get("workload")
        if isinstance(workload, dict):
            ran = {k: v for k, v in workload.items() if k not in ("compile", "channels_last")}  # the sweep's lists
            ran |= {"compile": record.compile, "channels_last": record.channels_last}
            configs.setdefault((machine_key(record), setup_key(record)), ran)
    return configs


def _matmul_heavy(config: dict[str, Any], records: Sequence[CellRecord]) -> bool:
    """What the user says of the workload, else what its reference config declares, else what the
    setup's records measure: the median share of a step's FLOPs in matmuls and convolutions (a
    workload this version does not know, or records without the share: no)."""
    if config.get("matmul_heavy") is not None:
        return bool(config["matmul_heavy"])
    if _reference(config):
        return WORKLOAD_CONFIG_BY_NAME[config["workload"]].matmul_heavy
    shares = [r.matmul_flop_share for r in records if r.matmul_flop_share is not None]
    return bool(shares) and statistics.median(shares) >= MATMUL_HEAVY_SHARE


def _heavy_names(
    heavy: dict[tuple[str, str], dict[str, Any]], by_setup: dict[tuple[str, str], list[CellRecord]], machine: str
) -> tuple[str, ...]:
    """The matmul-heavy reference kinds, then this machine's matmul-heavy user workloads by the
    names they were given (a label, a model's name, an entry's file)."""
    users = {
        record.workload
        for (key, setup), config in heavy.items()
        if key == machine and config.get("workload") in WORKLOAD_CONFIG_BY_NAME and not _reference(config)
        for record in by_setup[(key, setup)]
    }
    return (*MATMUL_HEAVY_WORKLOADS, *sorted(users))


def _reference(config: dict[str, Any]) -> bool:
    known = WORKLOAD_CONFIG_BY_NAME.get(config.get("workload", ""))
    return known is not None and known.reference
