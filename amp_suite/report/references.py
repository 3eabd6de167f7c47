"""Published reference figures (data files under amp_suite/references/) and whether they reproduce.

A reference is judged only against runs on the same GPU model (its name without vendor words, as
torch reports it) with the configuration it was measured with: never across GPU models. A
speedup is recomputed from the two matched throughputs of one machine, because a published
speedup may compare runs that differ in more than precision (NVIDIA's ResNet-50 TF32 side ran
NCHW, its AMP side channels_last). Verdicts: reproduced (within the tolerance), not reproduced,
no matching run (with why: no such GPU, no such configuration, or out of a matrix's reach), or
not judged: a kernel benchmark's figure beside its program run on another GPU or rehearsed on a
CPU, shown because a lease may not get the publisher's GPU, and never judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from amp_suite.analysis.summary import SummaryRow
from amp_suite.config import ConfigError
from amp_suite.config.loading import describe_validation_error, parse_yaml
from amp_suite.config.precisions import MODE_BY_NAME, REFERENCE, TF32_BASELINE, published_name
from amp_suite.config.workloads import WORKLOAD_CONFIG_BY_NAME
from amp_suite.files import RefusedFile, read_limited
from amp_suite.hardware.backends import backend_recorded
from amp_suite.records.machine import Machine

SHIPPED = Path(__file__).resolve().parent.parent / "references"
MAX_REFERENCE_BYTES = 4 << 20  # the shipped sets are a few kB
DEFAULT_TOLERANCE = 0.15  # relative, on throughput and on speedup
Verdict = Literal["reproduced", "not reproduced", "no matching run", "not judged"]
REPRODUCED: Verdict = "reproduced"
NOT_REPRODUCED: Verdict = "not reproduced"
NO_MATCHING_RUN: Verdict = "no matching run"
NOT_JUDGED: Verdict = "not judged"  # a kernel benchmark run on another GPU, or rehearsed on a CPU


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid")
    document: str
    table: str
    date: str
    url: str


class Reference(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9-]{1,100}$")
    source: Source
    gpu: str = Field(description="GPU model as torch names it, without 'NVIDIA '/'Tesla ' (A100-SXM4-80GB)")
    gpus: int = 1
    gpu_memory_gbps: float | None = Field(
        None, gt=0, description="where the publisher's GPU is a variant of the datasheet's: its memory bandwidth"
    )
    community: bool = Field(False, description="one run posted by a community member, not a vendor's table")
    model: str
    config: dict[str, Any] = Field(description="the measured configuration in the suite's terms (plus batch_size)")
    precision: str
    metric: Literal["throughput", "speedup", "top1_accuracy"]
    unit: str
    baseline: str | None = None
    baseline_config: dict[str, Any] = Field(default_factory=dict, description="where the baseline side differed")
    value: float
    needs: str | None = Field(None, description="why no matrix can match it (e.g. a 90-epoch run)")
    note: str | None = None
    tolerance: float = DEFAULT_TOLERANCE


class ReferenceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source_repository: str | None = None
    commit: str | None = None
    references: list[Reference]


class ReferenceResult(BaseModel):
    """One reference against one machine (or against none: `machine` is null)."""

    id: str
    community: bool
    gpu: str
    model: str
    precision: str
    metric: str
    unit: str
    published: float
    measured: float | None
    ratio: float | None  # measured / published
    tolerance: float
    verdict: Verdict
    needs: str | None  # what no matrix can run (a 90-epoch training): never matched
    estimated: float | None = None  # amp-suite predict's estimate of the published figure, where it makes one
    machine: str | None  # the machine id it was matched to
    why: str  # how the verdict was reached, in a sentence
    source: str  # document, table and date


def load_references(name_or_path: str | None) -> list[Reference]:
    """Shipped reference sets by name (all of them when None), or a YAML file of the same shape."""
    if name_or_path is None:
        return [ref for path in sorted(SHIPPED.glob("*.yaml")) for ref in _read(path)]
    path = Path(name_or_path)
    if not path.is_file():
        path = SHIPPED / f"{name_or_path.removesuffix('.yaml')}.yaml"
    if not path.is_file():
        shipped = sorted(p.stem for p in SHIPPED.glob("*.yaml"))
        raise ConfigError(f"--references: no file or shipped set named {name_or_path[:80]!r}; shipped: {shipped}")
    return _read(path)


def _read(path: Path) -> list[Reference]:
    try:
        text = (read_limited(path, MAX_REFERENCE_BYTES) or b"").decode("utf-8")
        return ReferenceFile.model_validate(parse_yaml(text, str(path))).references  # bounded as matrices are
    except RefusedFile as exc:
        raise ConfigError(f"--references {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable reference file ({type(exc).__name__})") from None
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation_error(exc)}") from None


def match_references(
    references: list[Reference],
    machines: dict[str, Machine],
    rows: list[SummaryRow],
    configs: dict[tuple[str, str], dict[str, Any]],
    machine_ids: dict[str, str],
) -> list[ReferenceResult]:
    """`configs`: (machine key, setup) -> the workload config that setup ran."""
    results = []
    for reference in references:
        results += _judge(reference, machines, rows, configs, machine_ids)
    return results


def _judge(reference, machines, rows, configs, machine_ids) -> list[ReferenceResult]:
    if reference.needs:
        return [_result(reference, None, None, NO_MATCHING_RUN, f"out of a short matrix's reach: {reference.needs}")]
    if reference.gpus != 1:
        return [_result(reference, None, None, NO_MATCHING_RUN, f"measured on {reference.gpus} GPUs; cells use one")]
    same_gpu = [key for key, machine in machines.items() if _same_gpu(machine, reference.gpu)]
    if not same_gpu and kernel_benchmark(reference):
        return _run_elsewhere(reference, machines, rows, configs, machine_ids) or [
            _result(reference, None, None, NO_MATCHING_RUN, f"no run on {reference.gpu}")
        ]
    if not same_gpu:
        return [_result(reference, None, None, NO_MATCHING_RUN, f"no run on {reference.gpu}")]
    results = []
    for key in same_gpu:
        measured = _measure(reference, key, rows, configs)
        if measured is None:
            continue
        ratio = measured / reference.value
        verdict = REPRODUCED if abs(ratio - 1) <= reference.tolerance else NOT_REPRODUCED
        why = f"measured {ratio:.0%} of the published figure (tolerance ±{reference.tolerance:.0%})"
        results.append(_result(reference, machine_ids[key], measured, verdict, why))
    if not results:
        wanted = ", ".join(f"{k} {v}" for k, v in reference.config.items() if k != "data")
        why = f"runs on {reference.gpu}, but none of {reference.precision} with {wanted}"
        return [_result(reference, None, None, NO_MATCHING_RUN, why)]
    return results


def with_estimates(results: list[ReferenceResult], references: list[Reference]) -> list[ReferenceResult]:
    """Each kernel benchmark's figure that a run measured, with `amp-suite predict`'s estimate of it
    beside (its program profiled: torch, imported only where there is one)."""
    measured = {r.id for r in results if r.measured is not None}
    wanted = {ref.id: ref for ref in references if ref.id in measured and kernel_benchmark(ref)}
    if not wanted:
        return results
    from amp_suite.report.benchmark_estimate import estimated_speedup

    estimates = {id_: estimated_speedup(ref) for id_, ref in wanted.items()}
    return [r.model_copy(update={"estimated": estimates[r.id]}) if r.id in estimates else r for r in results]


def _run_elsewhere(reference, machines, rows, configs, machine_ids) -> list[ReferenceResult]:
    """A kernel benchmark's figure beside its program run on another GPU model, or rehearsed on a
    CPU: the same ratio, shown and never judged."""
    found = []
    for key, machine in machines.items():
        measured = _measure(reference, key, rows, configs)
        if measured is not None:
            why = _why_not_judged(reference, machine)
            found.append(_result(reference, machine_ids[key], measured, NOT_JUDGED, why))
    return found


def _why_not_judged(reference: Reference, machine: Machine) -> str:
    if backend_recorded(machine.device_type).is_host:
        return (
            f"measured on a CPU, of the ops' CPU times, not {reference.gpu}'s GPU kernel times: a rehearsal of the"
            " program, not judged"
        )
    # Another H100 (PCIe, NVL) or an H200 runs the same kernels at other clocks, power and bandwidth.
    return (
        f"measured on {machine.model_name}, not the publisher's {reference.gpu}: the same program's kernel times on"
        " another GPU, shown, not judged"
    )


def kernel_benchmark(reference: Reference) -> bool:
    """Whether the figure is a kernel benchmark's (timed by its GPU kernels, not a training run's)."""
    known = WORKLOAD_CONFIG_BY_NAME.get(str(reference.config.get("workload")))
    return known is not None and known.kernel_benchmark


def _measure(reference: Reference, machine: str, rows: list[SummaryRow], configs) -> float | None:
    # NVIDIA's "mixed precision" (AMP) is fp16 with loss scaling: each mode says what tables call it.
    precision = published_name(reference.precision) or reference.precision
    throughput = _throughput(machine, precision, reference.config, rows, configs)
    if reference.metric == "throughput" or throughput is None:
        return throughput
    baseline_config = {**reference.config, **reference.baseline_config}
    baseline = _throughput(machine, reference.baseline or REFERENCE, baseline_config, rows, configs)
    return throughput / baseline if baseline else None


def _throughput(machine: str, precision: str, wanted: dict[str, Any], rows: list[SummaryRow], configs) -> float | None:
    for row in rows:
        if row.machine != machine or row.precision != precision or row.throughput is None:
            continue
        if row.max_batch or row.batch_size != wanted.get("batch_size"):
            continue
        if same_config(configs.get((machine, row.setup)), wanted):
            return row.throughput
    return None


def same_config(config: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Every setting the reference states, except its data (the suite's inputs stay on the device).
    A reference that does not mention compile ran eager, as every published table here did."""
    if config is None:
        return False
    wanted = {"compile": "off", **wanted}
    return all(config.get(key) == value for key, value in wanted.items() if key not in ("batch_size", "data"))


def _same_gpu(machine: Machine, gpu: str) -> bool:
    return not backend_recorded(machine.device_type).is_host and machine.model_name.casefold() == gpu.casefold()


def _result(reference: Reference, machine: str | None, measured: float | None, verdict: Verdict, why: str):
    source = reference.source
    return ReferenceResult(
        id=reference.id, community=reference.community, gpu=reference.gpu, model=reference.model,
        precision=reference.precision, metric=reference.metric, unit=reference.unit, published=reference.value,
        measured=measured, ratio=None if measured is None else measured / reference.value,
        tolerance=reference.tolerance, verdict=verdict, needs=reference.needs, machine=machine, why=why,
        source=f"{source.document}, {source.table} ({source.date})",
    )  # fmt: skip


@dataclass(frozen=True)
class PublishedSpeedup:
    """A mode's published throughput over its table's baseline, on one GPU, for one model: a speedup
    as the table implies it (each side with its own configuration: NVIDIA's AMP ran channels_last)."""

    ids: tuple[str, ...]
    gpu: str
    model: str
    precision: str  # the suite's mode
    baseline: str  # the suite's mode
    config: dict[str, Any]
    baseline_config: dict[str, Any]
    value: float


def published_speedups(references: list[Reference]) -> list[PublishedSpeedup]:
    """Every speedup the references state or imply on one GPU: a `speedup` entry as it is, and each
    mixed-precision throughput over the same table's TF32 throughput on that GPU, else its fp32's."""
    # A kernel benchmark's figures are held against its own program's estimate (cli.predict), not a matrix's.
    usable = [r for r in references if r.gpus == 1 and not r.needs and not kernel_benchmark(r)]
    found = [stated_speedup(r) for r in usable if r.metric == "speedup"]
    throughputs = [r for r in usable if r.metric == "throughput"]
    for amp in (r for r in throughputs if MODE_BY_NAME.get(_mode(r)) and MODE_BY_NAME[_mode(r)].autocast):
        same = [r for r in throughputs if (r.gpu, r.model, r.unit) == (amp.gpu, amp.model, amp.unit)
                and _setting(r.config) == _setting(amp.config)]  # fmt: skip
        base = next((r for baseline in (TF32_BASELINE, REFERENCE) for r in same if _mode(r) == baseline), None)
        stated = any((p.gpu, p.model, p.precision, p.baseline) == (amp.gpu, amp.model, _mode(amp), _mode(base))
                     and _setting(p.config) == _setting(amp.config) for p in found) if base else True  # fmt: skip
        if not stated:
            found.append(PublishedSpeedup((base.id, amp.id), amp.gpu, amp.model, _mode(amp), _mode(base),
                                          amp.config, base.config, amp.value / base.value))  # fmt: skip
    return found


def stated_speedup(reference: Reference) -> PublishedSpeedup:
    """A `speedup` entry as it is stated (amp-suite predict reads those that need no cell, too)."""
    r = reference
    return PublishedSpeedup((r.id,), r.gpu, r.model, _mode(r), r.baseline or REFERENCE, r.config,
                            {**r.config, **r.baseline_config}, r.value)  # fmt: skip


def _setting(config: dict[str, Any]) -> dict[str, Any]:
    """What two sides of one published speedup share: the model's configuration, but not the batch
    or the layout each side ran at (NVIDIA's AMP ran channels_last, and its V100 fp32 at batch 112)."""
    return {k: v for k, v in config.items() if k not in ("batch_size", "channels_last", "data")}


def _mode(reference: Reference) -> str:
    return published_name(reference.precision) or reference.precision
