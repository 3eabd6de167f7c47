"""Speedup, memory and validation-parity rows, recomputed from the records alone. No torch here.

A row pools the records of one (machine, setup, precision) over seeds and hosts, where the setup is
the cell's configuration but its seed and precision: machines (device model and software stack) and
differently configured workloads are never pooled. Its derived values are typed
(analysis.quantities): the speedup over each speed baseline of the same machine and setup, on the
seeds both finished (`_speedup`); the parity against fp32, the accuracy reference (`parity`); the
time to the workload's target (analysis.time_to_target); for DDP rows, the comparisons along the
DDP axes (`_with_ddp`). A comparison whose seeds saw other data than fp32's is invalid and judged by
nothing (`different_data`).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace

from pydantic import computed_field
from pydantic.dataclasses import dataclass

from amp_suite.analysis.bound import StepBound, step_bound
from amp_suite.analysis.quantities import FAIL, INDICATIVE, INVALID, NOT_JUDGED, PASS, Difference, Parity, Ratio
from amp_suite.analysis.ratios import mean_of, paired_ratio, ratio_interval
from amp_suite.analysis.speedup import contrasts, interval, sequential_ratio
from amp_suite.analysis.time_to_target import TimeToTarget, time_to_target
from amp_suite.config import AUTO_BATCH, ParityConfig
from amp_suite.config.base import DIVERGED, FAILED, INTERRUPTED, OK, OOM, SKIPPED
from amp_suite.config.matrix import LEGACY_PARITY_METHOD
from amp_suite.config.precisions import REFERENCE, SPEED_BASELINES, precision_order
from amp_suite.config.recorded import metric_label_of, recorded_workload
from amp_suite.hardware.backends import backend_recorded
from amp_suite.records.results import CellRecord, TimingStop

BASELINE = REFERENCE  # the accuracy reference and the default speed baseline
BASELINES = SPEED_BASELINES
# fp32 has learned where its validation metric beats chance by this much (relative): below, parity is not judged.
LEARNED_BY = 0.1
UNKNOWN_MACHINE = "unknown machine"  # records of cells that failed before the device was probed


def parity(amp: Sequence[float], fp32: Sequence[float], higher_is_better: bool, rule: ParityConfig) -> Parity | None:
    """AMP against fp32 over seed-paired runs (amp[i] and fp32[i] share a seed: the same initial
    weights and batches), by the rule's method (ParityConfig, carried by every record): a one-sided
    paired t test of non-inferiority, AMP passing where its degradation is shown below the margin,
    tolerance x |fp32 mean|, at level alpha. One seed has no spread to test: "indicative". Only
    degradation counts: AMP validating better is no failure. Records written before the test carry
    the noise-floor rule, and are judged by it."""
    if not amp or not fp32:
        return None
    delta = statistics.fmean(amp) - statistics.fmean(fp32)
    degradation = -delta if higher_is_better else delta
    margin = rule.tolerance * abs(statistics.fmean(fp32))
    judged = {
        "delta": delta,
        "tolerance": margin,
        "degradation": degradation,
        "method": rule.method,
        "seeds": len(amp),
    }
    if not math.isfinite(degradation):  # a NaN or inf metric fails, even with one seed
        return Parity(verdict=FAIL, **judged)
    if len(amp) < 2 or len(fp32) < 2:
        return Parity(verdict=INDICATIVE, **judged)
    if rule.method == LEGACY_PARITY_METHOD:
        judged["tolerance"] = max(margin, rule.k * statistics.stdev(fp32))
        return Parity(verdict=PASS if degradation <= judged["tolerance"] else FAIL, **judged)
    sign = -1 if higher_is_better else 1
    worse = [sign * (a - f) for a, f in zip(amp, fp32, strict=True)]  # each seed's degradation
    p_value, bound = non_inferiority(worse, margin, rule.alpha)
    return Parity(verdict=PASS if p_value < rule.alpha else FAIL, p_value=p_value, upper_bound=bound, **judged)


def non_inferiority(degradations: Sequence[float], margin: float, alpha: float) -> tuple[float, float]:
    """One-sided t test of H0: mean degradation >= margin against H1: it is smaller (AMP is not
    worse by the margin), over seed-paired differences: (p-value, the (1 - alpha) upper bound of
    the mean degradation). Differences without spread (AMP matched fp32 to the last digit on every
    seed) decide by their one value: t would divide by zero."""
    mean = statistics.fmean(degradations)
    if len(set(degradations)) == 1:
        return (0.0 if mean < margin else 1.0), mean
    from scipy import stats  # seconds to import: only where two or more seeds are compared

    result = stats.ttest_1samp(degradations, popmean=margin, alternative="less")
    return float(result.pvalue), float(result.confidence_interval(1 - alpha).high)


@dataclass(frozen=True)
class SummaryRow:
    machine: str  # Machine.key: device model and software stack
    setup: str  # identifies the configuration shared by every precision of this comparison
    matrix: str
    workload: str
    batch_size: int | None  # with batch_sizes auto: the largest that fitted this precision (None: none did)
    precision: str
    compile: str  # torch.compile mode, "off" for eager
    channels_last: bool
    status: str  # "ok" when every seed ran; otherwise the worst status seen
    reason: str | None
    runs: int  # runs that finished ok (seeds x hosts)
    hosts: int  # distinct hosts pooled into this row
    unit: str  # images/s, tokens/s or samples/s
    throughput: float | None  # mean over seeds that finished ok, in `unit`
    step_time_ms: float | None  # the mean step throughput counts, mean over seeds: one figure with throughput
    tflops: float | None  # achieved TFLOP/s, mean over seeds
    mfu: float | None  # achieved / the GPU's dense peak for this math mode; None where the peak is unknown
    peak_memory_mb: float | None
    speedups: dict[str, Ratio]  # throughput over each speed baseline's that finished (SPEED_BASELINES)
    memory_ratio: Ratio | None  # peak memory / fp32 peak memory
    max_batch: bool = False  # batch_sizes auto: each precision ran at the largest batch it fitted
    batch_vs_fp32: Ratio | None = None  # max_batch: this precision's batch / fp32's (how much more AMP fits)
    noisy: bool = False  # a seed's throughput varied beyond NOISY_SPREAD across the windows of its timed steps
    spread: float | None = None  # the widest such spread: (max - min) / median of a seed's windows
    throughput_range: tuple[float, float] | None = None  # the slowest and fastest window of any seed, in `unit`
    set_aside: tuple[str, ...] = ()  # windows a hiccup hit, left out of throughput and spread, with why
    throughput_stdev: float | None = None  # seed-to-seed sample standard deviation (two or more seeds), in `unit`
    throttled: bool = False  # the GPU slowed down for power or heat during a seed's timed steps (NVML)
    throttle_reasons: tuple[str, ...] = ()  # NVML's reasons, over every seed
    energy_j_per_sample: float | None = None  # GPU energy per training sample, mean over seeds (NVML)
    power_w: float | None = None  # average GPU power during the timed steps, mean over seeds
    val_metric_name: str | None = None
    val_metric_label: str | None = None  # the metric as tables name it ("acc", "ppl"): the workload's own
    val_metric: float | None = None  # mean over seeds that finished ok
    grad_underflow_fraction: float | None = None  # fp32 gradients below fp16's range, before training
    skipped_steps: float | None = None  # GradScaler: steps skipped on inf/NaN gradients, mean over seeds
    parity: Parity | None = None  # None for fp32 itself and where a side has no result
    world_size: int | None = None  # DDP: ranks; None for a cell that is not data-parallel
    comm_hook: str | None = None  # DDP: none (float32 all-reduce), fp16 or bf16 compression
    comm_share: float | None = None  # DDP: share of the synced step spent communicating, mean over seeds
    scaling_efficiency: Ratio | None = None  # DDP: throughput / (world size x world size 1's), same hook
    world_parity: Parity | None = None  # DDP: this world size against world size 1, same hook and precision
    hook_step_ratio: Ratio | None = None  # DDP: step time with this hook / with plain all-reduce, same world size
    hook_parity: Parity | None = None  # DDP: this hook against plain all-reduce, same world size and precision
    gpu_type: str | None = None  # the GPU type a Ray fleet was asked to run the cell on (matrix `machines:`)
    gpu_busy_ms: float | None = None  # the GPU's own work per step (its traced kernels), mean over seeds
    gpu_idle_fraction: float | None = None  # share of the step the GPU sat idle, mean over seeds
    gpu_work_ratio: Ratio | None = None  # fp32's GPU work per step / this mode's: what the mode saved the GPU
    bound: StepBound | None = None  # what set the step's pace (analysis.bound); None off a GPU or where unknown
    timing_stop: TimingStop | None = None  # side by side: how the comparison's timing stopped (a seed's)
    arms: str = ""  # the setup but how it ran (compile mode, layout, optimizer kernel, label): its arms share it
    time_to_target: TimeToTarget | None = None  # where the workload declares a target (analysis.time_to_target)
    kernel_benchmark: bool = False  # a benchmark of kernels (its fp8 modes against bf16), not a training run

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def speedup(self) -> Ratio | None:
        """Against fp32, the accuracy reference: what the answer weighs."""
        return self.speedups.get(REFERENCE)

    @computed_field  # type: ignore[prop-decorator]  # in report.json, as tables show it
    @property
    def variant(self) -> str:
        ddp = "" if self.world_size is None else f", ddp x{self.world_size}"
        hook = f" {self.comm_hook} hook" if self.comm_hook not in (None, "none") else ""
        on = f", on {self.gpu_type}" if self.gpu_type else ""
        return variant(self.compile, self.channels_last) + ddp + hook + on

    @computed_field  # type: ignore[prop-decorator]
    @property
    def batch(self) -> str:
        """The batch size as tables show it: "256", or "max 512" where it was searched for."""
        if not self.max_batch:
            return str(self.batch_size)
        return f"max {self.batch_size}" if self.batch_size is not None else "max -"

    @property
    def where(self) -> str:
        """The comparison this row belongs to, in words: workload, batch size, variant and matrix."""
        shown = "" if self.variant == EAGER else f" {self.variant}"
        batch = "max" if self.max_batch else self.batch_size
        return f"{self.workload}/bs{batch}{shown} ({self.matrix})"


EAGER = "eager"


def variant(compile: str, channels_last: bool) -> str:
    """How a cell ran besides its precision, in a word or two: "eager", "compiled (reduce-overhead)",
    "eager, channels_last"."""
    mode = EAGER if compile == "off" else f"compiled ({compile})"
    return f"{mode}, channels_last" if channels_last else mode


GroupKey = tuple[str, str, str]  # machine, setup, precision
SETUP_EXCLUDES = ("seed", "precision", "force", "device", "matrix")  # what may differ within one comparison
# Within the workload: which precisions are forced, and which other batch sizes, compile modes and
# layouts the matrix swept (the cell's own compile mode and layout are part of its setup).
WORKLOAD_SETUP_EXCLUDES = ("force", "batch_sizes", "compile", "channels_last", "ddp")  # ddp: the sweep's lists


def machine_key(record: CellRecord) -> str:
    return record.machine.key if record.machine else UNKNOWN_MACHINE


def setup_key(
    record: CellRecord, excludes: tuple[str, ...] = SETUP_EXCLUDES, within: tuple[str, ...] = WORKLOAD_SETUP_EXCLUDES
) -> str:
    """A short hash of the record's configuration without seed and precision (and matrix name);
    `within`: what the workload's own block leaves out."""
    config = {k: v for k, v in record.config.items() if k not in excludes}
    if isinstance(config.get("workload"), dict):
        config["workload"] = {k: v for k, v in config["workload"].items() if k not in within}
    if not config:  # a record without its config: as specific as the record allows
        config = {"workload": record.workload, "batch_size": record.batch_size, "steps": record.steps}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]


# An arm of a comparison differs from its siblings only in how it runs: the remedies a matrix measures
# side by side (CUDA graphs, channels_last, the fused optimizer), under a label of its own.
ARM_EXCLUDES = (*WORKLOAD_SETUP_EXCLUDES, "label", "fused_optimizer")


def arms_key(record: CellRecord) -> str:
    """The setup without how it ran: the comparisons that are arms of one model, batch and data."""
    return setup_key(record, (*SETUP_EXCLUDES, "compile", "channels_last"), ARM_EXCLUDES)


def group_key(record: CellRecord) -> GroupKey:
    return machine_key(record), setup_key(record), record.precision


DdpKey = tuple[str, str, str, int, str]  # machine, setup without the DDP axes, precision, world size, hook


def ddp_key(record: CellRecord) -> DdpKey | None:
    """Where a DDP record sits on the DDP axes of its comparison; None for other records."""
    if record.world_size is None:
        return None
    base = setup_key(record, (*SETUP_EXCLUDES, "ddp"))
    return machine_key(record), base, record.precision, record.world_size, record.comm_hook or "none"


def summarize(records: Iterable[CellRecord], default_rule: ParityConfig | None = None) -> list[SummaryRow]:
    """`default_rule`: for records written before they carried their parity rule."""
    found: dict[GroupKey, list[CellRecord]] = {}
    ddp: dict[DdpKey, list[CellRecord]] = {}
    for record in records:
        found.setdefault(group_key(record), []).append(record)
        if (key := ddp_key(record)) is not None:
            ddp.setdefault(key, []).append(record)
    # Comparisons in the order first seen, each one's modes in their declared order: the same rows
    # whatever order the records were written in (side by side, cells end in any order).
    comparisons = list(dict.fromkeys(key[:2] for key in found))
    groups = dict(sorted(found.items(), key=lambda item: (comparisons.index(item[0][:2]), precision_order(item[0][2]))))
    rule = default_rule or ParityConfig()
    rows = [_row(key, group, groups, rule) for key, group in groups.items()]
    return [_with_ddp(row, group, ddp, rule) for row, group in zip(rows, groups.values(), strict=True)]


def _with_ddp(row: SummaryRow, group: list[CellRecord], ddp: dict[DdpKey, list[CellRecord]], rule: ParityConfig):
    """The row with its comparisons along the DDP axes, where it is a DDP row, at the same machine,
    setup otherwise and precision: scaling efficiency is throughput(N) / (N x throughput at world size
    1, same hook); a hook's parity and step-time ratio compare it with plain float32 all-reduce
    ("none") at the same world size; world parity compares N with world size 1, same hook."""
    key = ddp_key(group[0])
    if key is None:
        return row
    machine, base, precision, world, hook = key
    unit_scale = _unit(group[0])[1]
    rates = _per_seed(group, "throughput", unit_scale)
    single = ddp.get((machine, base, precision, 1, hook), [])
    plain = ddp.get((machine, base, precision, world, "none"), [])
    rule = _rule(group + single + plain, rule)
    efficiency = _ratio_of(rates, _per_seed(single, "throughput", unit_scale), "world size 1") if single else None
    steps = _per_seed(group, "step_time_ms_p50")
    plain_steps = _per_seed(plain, "step_time_ms_p50")
    return replace(
        row,
        world_size=world,
        comm_hook=hook,
        comm_share=mean_of(_per_seed(group, "comm_share").values()),
        scaling_efficiency=None if efficiency is None else _over(efficiency, world),
        world_parity=_parity(group, single, rule) if single and world != 1 else None,
        hook_step_ratio=_ratio_of(steps, plain_steps, "plain all-reduce") if hook != "none" else None,
        hook_parity=_parity(group, plain, rule) if plain and hook != "none" else None,
    )


def _row(key: GroupKey, group: list[CellRecord], groups: dict[GroupKey, list[CellRecord]], rule: ParityConfig):
    machine, setup, precision = key
    unit, per_sample = _unit(group[0])
    rates = _per_seed(group, "throughput", per_sample)
    memory = _per_seed(group, "peak_memory_mb")
    bases = {name: groups.get((machine, setup, name), []) for name in BASELINES}
    found = {name: _speedup(group, base, name, itself=name == precision) for name, base in bases.items()}
    speedups = {name: over for name, over in found.items() if over is not None}
    fp32 = bases[BASELINE]
    ok = [r for r in group if r.status == OK]
    searched = group[0].config.get("batch_size") == AUTO_BATCH  # batch_sizes auto: each at its largest
    windows = [w * per_sample for r in ok for i, w in enumerate(r.throughput_windows) if i not in _aside(r)]
    metric = next((r.val_metric_name for r in group if r.val_metric_name), None)
    return SummaryRow(
        machine=machine,
        setup=setup,
        matrix=group[0].matrix,
        workload=group[0].workload,
        batch_size=next((r.batch_size for r in ok), group[0].batch_size),
        precision=precision,
        compile=group[0].compile,
        channels_last=group[0].channels_last,
        gpu_type=group[0].config.get("machine"),
        arms=arms_key(group[0]),
        kernel_benchmark=_kernel_benchmark(group[0]),
        timing_stop=next((r.timing_stop for r in ok if r.timing_stop is not None), None),
        status=_status(group),
        reason=next((r.reason for r in group if r.reason), None),
        runs=len(ok),
        hosts=len({r.machine.host for r in group if r.machine}),
        unit=unit,
        throughput=mean_of(rates.values()),
        throughput_stdev=statistics.stdev(rates.values()) if len(rates) > 1 else None,
        step_time_ms=_mean_step_ms(group),
        tflops=mean_of(_per_seed(group, "tflops").values()),
        mfu=mean_of(_per_seed(group, "mfu").values()),
        peak_memory_mb=mean_of(memory.values()),
        speedups=speedups,
        memory_ratio=_ratio_of(memory, _per_seed(fp32, "peak_memory_mb"), BASELINE),
        max_batch=searched,
        batch_vs_fp32=_ratio_of(_per_seed(group, "batch_size"), _per_seed(fp32, "batch_size"), BASELINE)
        if searched
        else None,
        noisy=any(r.noisy for r in ok),
        spread=max((r.throughput_spread for r in ok if r.throughput_spread is not None), default=None),
        throughput_range=(min(windows), max(windows)) if windows else None,
        set_aside=tuple(
            f"seed {r.seed} window {w.window + 1} of {len(r.throughput_windows)}: {w.reason}"
            for r in ok for w in r.windows_set_aside
        ),  # fmt: skip
        throttled=any(r.throttled for r in ok),
        throttle_reasons=tuple(sorted({reason for r in ok for reason in r.throttle_reasons or ()})),
        energy_j_per_sample=mean_of(_per_seed(group, "energy_j_per_sample").values()),
        power_w=mean_of(_per_seed(group, "power_w").values()),
        val_metric_name=metric,
        val_metric_label=metric and metric_label_of(group[0].config.get("workload"), metric),
        val_metric=mean_of([r.val_metric for r in ok]),
        grad_underflow_fraction=mean_of([r.grad_underflow_fraction for r in ok]),
        skipped_steps=mean_of([r.skipped_steps for r in ok]),
        **_gpu_work(group, fp32),
        **_against_fp32(precision, group, fp32, _rule(group + fp32, rule)),
    )


def _gpu_work(group: list[CellRecord], fp32: list[CellRecord]) -> dict[str, object]:
    """The GPU's own work per step, its share idle, its ratio to fp32's on the seeds both traced,
    and the step's bound: measured where traced, against the mean step throughput counts; else
    inferred from MFU, against the median step. None of it off a GPU."""
    busy, fp32_busy = _per_seed(group, "gpu_busy_ms_per_step"), _per_seed(fp32, "gpu_busy_ms_per_step")
    saved = paired_ratio(fp32_busy, busy)
    found = {
        "gpu_busy_ms": mean_of(busy.values()),
        "gpu_idle_fraction": mean_of(_per_seed(group, "gpu_idle_fraction").values()),
        "gpu_work_ratio": None if saved is None else Ratio(saved, BASELINE, seeds=len(busy.keys() & fp32_busy.keys())),
    }
    if backend_recorded(group[0].device).is_host and not busy:  # a CPU: its "device" is the host
        return found
    step = _mean_step_ms(group) if busy else mean_of(_per_seed(group, "step_time_ms_p50").values())
    found["bound"] = step_bound(
        step,
        found["gpu_busy_ms"],
        found["gpu_idle_fraction"],
        mfu=mean_of(_per_seed(group, "mfu").values()),
        matmul_share=mean_of(_per_seed(group, "matmul_flop_share").values()),
        power_w=mean_of(_per_seed(group, "power_w").values()),
    )
    return found


def _mean_step_ms(group: list[CellRecord]) -> float | None:
    """The mean step throughput counts (every device's samples per step over samples per second),
    mean over seeds: what a cell's idle share is a share of."""
    steps = {}
    for record in group:
        if record.status == OK and record.throughput and record.batch_size:
            samples = (record.world_size or 1) * record.batch_size
            steps.setdefault(record.seed, []).append(samples * 1e3 / record.throughput)
    return mean_of(statistics.fmean(values) for values in steps.values())


def _aside(record: CellRecord) -> set[int]:
    return {window.window for window in record.windows_set_aside}


def _speedup(group: list[CellRecord], baseline: list[CellRecord], name: str, itself: bool) -> Ratio | None:
    """Throughput over the baseline's: the ratio of mean throughputs over the seeds both finished (a
    seed that failed on one side can't tilt it; hosts of one machine averaged per seed first), with
    its 95% interval from each seed's windows (paired window by window where the cells ran side by
    side) and the seeds' spread (analysis.speedup), none against itself (1x); None where either side
    has no throughput."""
    rates, base = _per_seed(group, "throughput"), _per_seed(baseline, "throughput")
    value = paired_ratio(rates, base)
    if value is None:
        return None
    seeds = sorted(rates.keys() & base.keys())
    if itself:
        return Ratio(value, name, seeds=len(seeds))
    found = [c for seed in seeds for c in contrasts(_ok_of_seed(group, seed), _ok_of_seed(baseline, seed))]
    side_by_side = bool(found) and all(c.side_by_side for c in found)
    # One seed timed round by round until the stopping rule decided: the rule's interval, as it stopped on.
    if len(seeds) == 1 and side_by_side:
        ruled = sequential_ratio(_ok_of_seed(group, seeds[0]), _ok_of_seed(baseline, seeds[0]))
        if ruled is not None:
            return Ratio(ruled[0], name, ruled[1], 1, True)
    return Ratio(value, name, interval(value, found), len(seeds), side_by_side)


def _ratio_of(values: dict[int, float], baseline: dict[int, float], name: str) -> Ratio | None:
    """mean(values) / mean(baseline) on the seeds both have, with its interval where two or more do."""
    middle = paired_ratio(values, baseline)
    if middle is None:
        return None
    return Ratio(middle, name, ratio_interval(values, baseline), len(values.keys() & baseline.keys()))


def _over(ratio: Ratio, factor: float) -> Ratio:
    """The ratio divided by `factor`: a scaling efficiency is throughput(N) / (N x world size 1's)."""
    low_high = ratio.interval and (ratio.interval[0] / factor, ratio.interval[1] / factor)
    return Ratio(ratio.value / factor, f"{ratio.baseline} x {factor}", low_high, ratio.seeds)


def _ok_of_seed(group: list[CellRecord], seed: int) -> list[CellRecord]:
    return [r for r in group if r.status == OK and r.seed == seed and r.throughput is not None]


def _against_fp32(precision: str, group: list[CellRecord], fp32: list[CellRecord], rule: ParityConfig):
    """Parity and time to target against fp32's runs of the same seeds, where they saw the same
    data in the same order; where they did not, neither is judged and the comparison is invalid."""
    if precision == BASELINE:  # its own time: 1x, no interval to show
        reach = time_to_target(group, fp32)
        return {"time_to_target": reach and replace(reach, speedup_interval=None)}
    parity, invalid = _parity(group, fp32, rule), different_data(group, fp32)
    if invalid is None:
        unlearned = parity and did_not_learn(fp32)
        if unlearned:
            parity = replace(parity, verdict=NOT_JUDGED, unlearned=unlearned, p_value=None, upper_bound=None)
        return {"parity": parity, "time_to_target": time_to_target(group, fp32)}
    unjudged = Parity(math.nan, math.nan, INVALID) if parity is None else parity
    judged_nothing = {"verdict": INVALID, "invalid": invalid, "p_value": None, "upper_bound": None}
    return {"parity": replace(unjudged, **judged_nothing)}


def did_not_learn(fp32: list[CellRecord]) -> str | None:
    """Where fp32's validation metric is no better than chance (what the labels' frequencies alone
    score) by LEARNED_BY, what it scored, in words: matching fp32 then says nothing of accuracy."""
    scored = [r for r in fp32 if r.status == OK and r.val_metric is not None and r.val_metric_chance is not None]
    if not scored:
        return None
    metric = statistics.fmean(r.val_metric for r in scored)
    chance = statistics.fmean(r.val_metric_chance for r in scored)  # type: ignore[misc]  # filtered above
    higher_is_better = scored[0].val_higher_is_better is not False
    learned = metric > chance * (1 + LEARNED_BY) if higher_is_better else metric < chance / (1 + LEARNED_BY)
    if learned:
        return None
    label = metric_label_of(scored[0].config.get("workload"), scored[0].val_metric_name or "")
    return f"{BASELINE} did not learn: {label} {metric:.3g}, where the labels' frequencies alone score {chance:.3g}"


def different_data(group: list[CellRecord], fp32: list[CellRecord]) -> Difference | None:
    """Where a seed's runs saw other data (fingerprint) or other batches in another order
    (batch_order_hash) than fp32's runs of that seed: what differed, else None. Batch order is
    compared at equal batch sizes only: with batch_sizes auto each precision cuts the same data into
    the batches it fits. Runs that never drew batches (skipped, failed early) carry neither."""
    for field, kind in (("data_fingerprint", "data"), ("batch_order_hash", "batch order")):
        mine, theirs = _seen(group, field), _seen(fp32, field)
        for seed, size in sorted(mine.keys() & theirs.keys()):
            if mine[seed, size] != theirs[seed, size]:
                where = f"seed {seed}" if kind == "data" else f"seed {seed}, batch {size}"
                words = f"{where}: {kind} {_short(mine[seed, size])} differs from fp32's {_short(theirs[seed, size])}"
                return Difference(kind, seed, words)  # type: ignore[arg-type]  # kind: a Literal of the two
    return None


def _seen(records: list[CellRecord], field: str) -> dict[tuple[int, int | None], set[str]]:
    """The field's values per (seed, batch size); per seed alone (batch None) for the data fingerprint."""
    seen: dict[tuple[int, int | None], set[str]] = {}
    for record in records:
        if (value := getattr(record, field)) is not None:
            size = None if field == "data_fingerprint" else record.batch_size
            seen.setdefault((record.seed, size), set()).add(value)
    return seen


def _short(values: set[str]) -> str:
    return "/".join(sorted(v[:12] for v in values))


def _parity(group: list[CellRecord], baseline: list[CellRecord], rule: ParityConfig) -> Parity | None:
    """Compare on the seeds both sides finished, so a failed seed can't bias either mean."""
    amp = _per_seed(group, "val_metric")
    amp |= {r.seed: math.nan for r in group if r.status == DIVERGED}  # a diverged run fails parity
    fp32 = _per_seed(baseline, "val_metric")
    seeds = sorted(amp.keys() & fp32.keys())
    higher_is_better = next((r.val_higher_is_better for r in group if r.val_higher_is_better is not None), True)
    return parity([amp[s] for s in seeds], [fp32[s] for s in seeds], higher_is_better, rule)


def _rule(records: list[CellRecord], default: ParityConfig) -> ParityConfig:
    return next((r.parity_rule for r in records if r.parity_rule is not None), default)


def _per_seed(group: list[CellRecord], field: str, scale: float = 1.0) -> dict[int, float]:
    """One value per seed from the records that finished ok (several hosts of one machine: their mean)."""
    values: dict[int, list[float]] = {}
    for record in group:
        value = getattr(record, field)
        if record.status == OK and value is not None:
            values.setdefault(record.seed, []).append(value * scale)
    return {seed: statistics.fmean(v) for seed, v in values.items()}


def other_baselines(rows: Sequence[SummaryRow], main: str) -> list[str]:
    """The speed baselines besides `main` that a table needs a column for: where a row that is
    neither that baseline nor `main` is measured against it. With fp32 and bf16 alone, a "vs bf16"
    column would only say fp32's speedup again, upside down."""
    return [
        b for b in SPEED_BASELINES
        if b != main and any(b in r.speedups and r.precision not in (b, main) for r in rows)
    ]  # fmt: skip


def natural_throughput(record: CellRecord) -> tuple[float | None, str]:
    """The record's throughput in its workload's natural unit (images/s, tokens/s, samples/s)."""
    unit, per_sample = _unit(record)
    return (None if record.throughput is None else record.throughput * per_sample), unit


def _unit(record: CellRecord) -> tuple[str, int]:
    """The natural throughput unit of the record's workload, and its items per training sample;
    samples, which is always true, for a config another version wrote."""
    workload = recorded_workload(record.config.get("workload"))
    return ("samples/s", 1) if workload is None else (workload.throughput_unit, workload.units_per_sample())


def _kernel_benchmark(record: CellRecord) -> bool:
    workload = recorded_workload(record.config.get("workload"))
    return workload is not None and workload.kernel_benchmark


def _status(group: list[CellRecord]) -> str:
    statuses = {r.status for r in group}
    for status in (FAILED, INTERRUPTED, OOM, DIVERGED, SKIPPED):
        if status in statuses:
            return status
    return OK
