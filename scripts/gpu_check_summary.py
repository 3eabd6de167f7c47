#!/usr/bin/env python3
"""The screen scripts/gpu-check.sh leaves in OUT_DIR/gpu-check.txt, one block at a time.

    python scripts/gpu_check_summary.py stage WORK NAME --exit N --wall-s S --budget-s S
                                              [--estimate-s S] [--matrix NAME]
    python scripts/gpu_check_summary.py checks WORK [--gpus N] [--rehearsal]

WORK is the script's working folder: WORK/run/results.jsonl (every matrix's records, the records
of truth), WORK/NAME.txt (each stage's output), WORK/nvidia-smi.txt and WORK/stages.tsv.

`stage` prints one stage's block, which the script appends as soon as the stage ends (so a run cut
short still leaves what it did): the stage's exit code (124: its time budget ran out), wall time
beside the script's estimate and against the budget, and its key figures: one line per cell its
matrix recorded, or the last line of its output. `checks` prints the machine and one PASS/FAIL
line per GPU-only fact that issue 19's fixes (and issue 25's fp8) promise, read from the records,
then the verdict; it exits 1 when a check fails. With --rehearsal (`gpu-check.sh --rehearse`, on a
CPU) the checks are printed under a line that says they are GPU facts, not judged, and it exits 0:
what the rehearsal proves is that they read the records without failing.
No torch here, and no amp_suite but its torch-free analysis.bound, imported where a cell line names
its bound, and config.base's window edges, where time to target adds up the windows (a suite that
fails to import leaves the figures, and says so): the records are read as plain JSON.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

TIMED_OUT = 124  # timeout(1)'s exit code when the budget ran out
# NVIDIA's UUIDs: "GPU-" or, for a MIG slice, "MIG-", then 8-4-4-4-12 hex digits.
UUID = re.compile(r"^(GPU|MIG)-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)
LISTED_UUID = re.compile(r"UUID:\s*((?:GPU|MIG)-[0-9A-Za-z-]+)")  # nvidia-smi -L
Check = tuple[str, str, str]  # (PASS | FAIL | n/a, what, the figures behind it)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _format(value: object, form: str) -> str:
    return format(value, form) if _number(value) else "-"


def _kind(record: dict) -> str:
    """The workload's kind (mlp, transformer, resnet), whatever label the matrix gave it."""
    workload = (record.get("config") or {}).get("workload") or {}
    return workload.get("workload") or record.get("workload") or "?"


def timed_s(record: dict) -> float | None:
    """How long the timed steps took: every rank's samples over the cell's throughput (side by
    side, each turn's first step is trained but not timed: `untimed_steps`)."""
    batch, steps, rate = record.get("batch_size"), record.get("steps"), record.get("throughput")
    if not (_number(batch) and _number(steps) and _number(rate)) or rate <= 0:
        return None
    return (record.get("world_size") or 1) * batch * (steps - (record.get("untimed_steps") or 0)) / rate


def all_windows_s(record: dict) -> float | None:
    """How long the matrix's timed steps took, every window of its schedule counted, one set aside as
    a hiccup or as warming too: each window's timed samples over its rate (config.base.window_edges;
    side by side, each turn's first step is trained, not timed). Throughput counts the windows kept
    only, so `timed_s` falls short of the steps' spans wherever one was set aside. `timed_s` where
    the record has no windows (or the suite's window_edges can't be imported)."""
    rates, steps, batch = record.get("throughput_windows") or [], record.get("steps"), record.get("batch_size")
    try:
        from amp_suite.config.base import window_edges
    except ImportError:
        return timed_s(record)
    if not (_number(steps) and _number(batch) and rates and all(_number(rate) and rate > 0 for rate in rates)):
        return timed_s(record)
    edges = window_edges(int(steps))
    if len(rates) < len(edges) - 1:  # rounds past the schedule add windows after it; fewer: not this schedule's
        return timed_s(record)
    untimed, samples = (1 if record.get("untimed_steps") else 0), (record.get("world_size") or 1) * batch
    windows = zip(edges[:-1], edges[1:], rates[: len(edges) - 1], strict=True)
    return sum((end - start - untimed) * samples / rate for start, end, rate in windows)


def records(work: Path) -> list[dict]:
    path = work / "run" / "results.jsonl"
    found = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut off by a stage that was stopped mid-write
        if isinstance(record, dict) and "cell_id" in record and "status" in record:
            found.append(record)
    return found


def cell_line(record: dict) -> str:
    figures = [
        f"{_format(record.get('throughput'), ',.0f')}/s",
        f"{_format(record.get('tflops'), '.1f')} TFLOP/s",
        f"MFU {_format(record.get('mfu'), '.0%')}",
        f"{_format(record.get('energy_j_per_sample'), '.3g')} J/sample",
        f"timed {_format(timed_s(record), '.1f')} s",
        f"syncs/step {_format(record.get('host_syncs_per_step'), 'g')}",
        f"GPU busy {_format(record.get('gpu_busy_ms_per_step'), '.3g')} ms/step"
        f" ({_format(record.get('gpu_idle_fraction'), '.0%')} idle)",
        bound_of(record),
    ]
    if _kind(record) == BENCHMARK:  # timed by its kernels (a CPU's op times in a rehearsal)
        figures[4:8] = [f"kernel time {_format(record.get('kernel_ms_per_step'), '.4g')} ms/iteration"]
    if record.get("compile", "off") != "off":
        figures.append(f"warmup {_format(record.get('warmup_s'), '.0f')} s")
    if record.get("throttled"):
        figures.append("THROTTLED " + ",".join(record.get("throttle_reasons") or []))
    search = record.get("batch_search")
    if search:
        figures.append(f"largest batch {search.get('found')} ({search.get('limited_by')})")
    if record.get("comm_share") is not None:
        figures.append(f"comm {_format(record['comm_share'], '.0%')} of a step")
    visible = (record.get("environment") or {}).get("cuda_visible_devices")
    if visible:
        figures.append(f"on GPU {visible}")
    text = f"  {record['status']:8} {record['cell_id']:50} " + " | ".join(figures)
    if record["status"] != "ok" and record.get("reason"):
        text += f"\n{'':11}{str(record['reason'])[:140]}"
    return text


def bound_of(record: dict) -> str:
    """What set the cell's pace (amp_suite.analysis.bound): measured from its traced GPU work, else
    inferred from MFU; "bound ?" where neither tells."""
    try:
        from amp_suite.analysis.bound import step_bound
    except ImportError as error:
        return f"bound ? (amp_suite.analysis.bound: {error})"
    figures = {key: record.get(key) for key in ("mfu", "power_w")}
    found = step_bound(
        record.get("step_time_ms_p50"), record.get("gpu_busy_ms_per_step"), record.get("gpu_idle_fraction"),
        matmul_share=record.get("matmul_flop_share"), **figures,
    )  # fmt: skip
    return found.bound + ("" if found.measured else " (inferred from MFU)") if found else "bound ?"


def by_status(found: list[dict]) -> str:
    statuses = Counter(record["status"] for record in found)
    return f"{len(found)} cells: " + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return lines[-1].strip()[:140] if lines else "(no output)"


def stage_block(
    work: Path, name: str, code: int, wall_s: float, budget_s: float, matrix: str | None,
    estimate_s: float | None = None,
) -> str:
    """One stage: how it ended, how long it took beside its estimate, and what it measured (its
    matrix's cells) or said (its last line)."""
    estimate = f" (estimate ~{estimate_s:.0f} s)" if estimate_s is not None else ""
    ended = f"TIMED OUT after {wall_s:.0f} s{estimate} of {budget_s:.0f} s" if code == TIMED_OUT else f"exit {code}"
    head = f"[{name}] {ended}" + ("" if code == TIMED_OUT else f", {wall_s:.0f} s{estimate} of {budget_s:.0f} s")
    if matrix is None:
        return f"{head}: {_last_line(work / f'{name}.txt')}"
    cells = [record for record in records(work) if record.get("matrix") == matrix]
    if not cells:  # refused before any cell ran (a bad matrix: exit 2), or cut off: its last word
        return f"{head}: {matrix}: no cells recorded: {_last_line(work / f'{name}.txt')}"
    return "\n".join([f"{head}: {matrix}: {by_status(cells)}", *map(cell_line, cells)])


# -- the checks: what only a GPU can show about issue 19's fixes --------------------------------


def check_batch_search(found: list[dict]) -> Check:
    """AMP's largest batch is measured with AMP's memory: bf16 fits more than fp32."""
    what = "batch search: bf16 fits a larger batch than fp32"
    searches = {r["precision"]: r["batch_search"] for r in found if r["status"] == "ok" and r.get("batch_search")}
    missing = [precision for precision in ("fp32", "bf16") if precision not in searches]
    skipped = [r for r in found if r["status"] == "skipped" and r.get("matrix") == "gpu-check-batch"]
    if missing and skipped:  # bf16 on a GPU without it (a V100, a T4): nothing to compare, nothing wrong
        return "n/a", what, f"{skipped[0]['cell_id']} skipped: {str(skipped[0].get('reason'))[:100]}"
    if missing:
        return "FAIL", what, f"no ok batch-search record for {', '.join(missing)}"
    fp32, bf16 = searches["fp32"], searches["bf16"]
    figures = ", ".join(f"{p} {s.get('found')} ({s.get('limited_by')})" for p, s in (("bf16", bf16), ("fp32", fp32)))
    if fp32.get("limited_by") != "memory":
        return "FAIL", what, f"{figures}: fp32 did not run out of memory, so nothing is compared"
    larger = _number(bf16.get("found")) and _number(fp32.get("found")) and bf16["found"] > fp32["found"]
    ratio = f", {bf16['found'] / fp32['found']:.2f}x" if larger else ""
    return ("PASS" if larger else "FAIL"), what, figures + ratio


# The compiled cells gpu-check runs because only a GPU can show their defects fixed.
EXPECTED_COMPILED: tuple[tuple[str, Callable[[dict], bool]], ...] = (
    ("tf32 + max-autotune", lambda r: r["precision"] == "tf32" and str(r.get("compile")).startswith("max-autotune")),
    ("transformer under CUDA graphs", lambda r: _kind(r) == "transformer"
        and r.get("compile") in ("reduce-overhead", "max-autotune")),
    ("MLP reduce-overhead", lambda r: _kind(r) == "mlp" and r.get("compile") == "reduce-overhead"),
)  # fmt: skip


def check_compiled(found: list[dict]) -> Check:
    what = "compiled cells ended ok"
    # The compile stage's cells (the fp8 stage compiles too, and check_fp8 judges its cells).
    compiled = [r for r in found if r.get("compile", "off") != "off" and r.get("matrix") == "gpu-check-compile"]
    absent = [name for name, matches in EXPECTED_COMPILED if not any(matches(r) for r in compiled)]
    bad = [f"{r['cell_id']} {r['status']}: {str(r.get('reason'))[:70]}" for r in compiled if r["status"] != "ok"]
    problems = ([f"not run: {', '.join(absent)}"] if absent else []) + bad
    if problems:
        return "FAIL", what, "; ".join(problems)[:300]
    return "PASS", what, f"{len(compiled)} of {len(compiled)}: " + ", ".join(name for name, _ in EXPECTED_COMPILED)


def _mfu_check(what: str, cells: list[dict]) -> Check:
    known = [r for r in cells if _number(r.get("peak_tflops"))]
    unknown = Counter(r["precision"] for r in cells if not _number(r.get("peak_tflops")))
    if not known:
        return "n/a", what, f"none of {len(cells)} ok cells has a GPU peak in the table (no MFU to judge)"
    bad = [r for r in known if not (_number(r.get("mfu")) and 0 < r["mfu"] <= 1)]
    no_peak = f"; no peak for {', '.join(f'{p} ({n})' for p, n in sorted(unknown.items()))}" if unknown else ""
    if bad:
        listed = ", ".join(f"{r['cell_id']} {_format(r.get('mfu'), '.2f')}" for r in bad[:3])
        return "FAIL", what, f"{len(bad)} of {len(known)} cells with a known peak: {listed}{no_peak}"
    top = max(known, key=lambda r: r["mfu"])
    return "PASS", what, f"{len(known)} cells, highest {top['mfu']:.0%} ({top['cell_id']}){no_peak}"


def check_mfu(found: list[dict]) -> Check:
    ok = [r for r in found if r["status"] == "ok" and not (r.get("world_size") or 1) > 1]
    return _mfu_check("MFU present and <= 1 (cells with a known peak)", ok)


def check_ddp_mfu(found: list[dict], gpus: int | None) -> Check:
    what = "MFU <= 1 for DDP cells on 2+ GPUs"
    if gpus is None or gpus < 2:
        return "n/a", what, f"this machine has {gpus if gpus is not None else '?'} GPU: DDP did not run"
    ddp = [r for r in found if r["status"] == "ok" and (r.get("world_size") or 1) >= 2]
    if not ddp:
        return "FAIL", what, "no ok DDP cell at world size 2 or more"
    return _mfu_check(what, ddp)


def check_energy(found: list[dict]) -> Check:
    """NVML's energy counter needs timed steps of at least a second (amp_suite.instruments.gpu_state)."""
    what = "energy (NVML) recorded for every ok cell"
    ok = [r for r in found if r["status"] == "ok"]
    if not ok:
        return "FAIL", what, "no ok cell"
    null = [r for r in ok if not (_number(r.get("energy_j")) and r["energy_j"] > 0)]
    windows = [s for s in map(timed_s, ok) if s is not None]
    span = f", timed steps {min(windows):.1f}-{max(windows):.1f} s" if windows else ""
    if not null:
        return "PASS", what, f"{len(ok)} cells{span}"
    first = null[0]
    note = str(first.get("gpu_state_note") or "no note")[:90]
    listed = f"{first['cell_id']} (timed {_format(timed_s(first), '.2f')} s: {note})"
    return "FAIL", what, f"null in {len(null)} of {len(ok)} cells, e.g. {listed}"


def check_time_to_target(found: list[dict]) -> Check:
    """Cells with a target evaluate between runs of CUDA-timed steps: throughput's seconds must be
    the runs' spans (the last evaluation's train_s), the evaluations' time apart in eval_s."""
    what = "time to target: evaluations outside the timed steps"
    evaluated = [r for r in found if r["status"] == "ok" and r.get("eval_every")]
    if not evaluated:
        return "FAIL", what, "no ok cell evaluated for a target (experiments/gpu-check.yaml declares one)"
    wrong = []
    for r in evaluated:
        curve, timed, spent = r.get("eval_curve") or [], all_windows_s(r), r.get("eval_s")
        expected = -(-r["steps"] // r["eval_every"])  # an evaluation per run of steps, the last the cell's own
        last = curve[-1].get("train_s") if curve else None
        if len(curve) != expected or not (_number(spent) and spent > 0):
            wrong.append(f"{r['cell_id']}: {len(curve)} evaluations (expected {expected}), eval_s {spent}")
        elif not (_number(last) and timed is not None and abs(last - timed) <= 0.01 * timed):
            wrong.append(f"{r['cell_id']}: timed {_format(timed, '.3f')} s but the last evaluation at {last} s")
    if wrong:
        return "FAIL", what, "; ".join(wrong)[:300]
    spent = ", ".join(f"{r['precision']} {r['eval_s']:.2f} s" for r in evaluated)
    return "PASS", what, f"{len(evaluated)} cells, evaluations took {spent}"[:300]


def check_fp8(found: list[dict]) -> Check:
    """Issue 25: the compiled fp8 cell (experiments/gpu-check-fp8.yaml) ran float8 matmuls, and its
    speed against bf16 of the same setup. Skipped below compute capability 8.9: n/a, with why."""
    what = "fp8 ran float8 matmuls (speed vs bf16)"
    fp8 = [r for r in found if str(r["precision"]).startswith("fp8") and r.get("compile", "off") != "off"
           and _kind(r) != BENCHMARK]  # fmt: skip
    if not fp8:
        return "FAIL", what, "no compiled fp8 cell recorded (experiments/gpu-check-fp8.yaml runs one)"
    cell = fp8[0]
    if cell["status"] == "skipped":
        return "n/a", what, f"{cell['cell_id']} skipped: {str(cell.get('reason'))[:200]}"
    if cell["status"] != "ok":
        return "FAIL", what, f"{cell['cell_id']} {cell['status']}: {str(cell.get('reason'))[:200]}"
    audit = cell.get("dtype_audit") or {}
    scaled = sum(op.get("calls", 0) for op in audit.get("ops", []) if op.get("op") == "_scaled_mm")
    ran = f"matmul dtype {cell.get('matmul_dtype')}, {scaled} scaled matmuls, {cell.get('fp8_layers')} fp8 layers"
    bf16 = [r for r in found if r["status"] == "ok" and r["precision"] == "bf16" and _same_setup(r, cell)]
    speed = "no bf16 cell of the same setup"
    if bf16 and _number(cell.get("throughput")) and _number(bf16[0].get("throughput")):
        ratio = cell["throughput"] / bf16[0]["throughput"]
        speed = f"{ratio:.2f}x bf16 ({cell['throughput']:,.0f}/s vs {bf16[0]['throughput']:,.0f}/s)"
    if not (str(cell.get("matmul_dtype")).startswith("float8") and scaled > 0):
        return "FAIL", what, f"{cell['cell_id']}: {ran}"
    return "PASS", what, f"{cell['cell_id']}: {ran}; {speed}"


BENCHMARK = "torchao-float8-linear"  # experiments/torchao-float8.yaml's workload: timed by its kernels alone
# torchao's published speedups of fp8-tensorwise over bf16 (amp_suite/references/torchao-float8.yaml), by M, K, N,
# and the GPU they were measured on: a lease may get another.
PUBLISHED = {(1024, 2048, 1024): 0.80, (4096, 8192, 16384): 1.39}
PUBLISHED_ON = "H100 80GB HBM3"


def _shape(record: dict) -> tuple[int, int, int]:
    workload = (record.get("config") or {}).get("workload") or {}
    return record.get("batch_size"), workload.get("in_features"), workload.get("out_features")


def check_float8_benchmark(found: list[dict]) -> Check:
    """Issue 51: torchao's float8 single-linear benchmark (the float8-bench stage) at its published
    shapes: fp8 over bf16 in GPU kernel time, beside the published speedup (the report's references
    table holds `amp-suite predict`'s estimate beside both; this script stays torch-free)."""
    what = "torchao float8 benchmark (fp8 / bf16 in kernel time)"
    cells = [r for r in found if _kind(r) == BENCHMARK]
    if not cells:
        return "FAIL", what, "no cell recorded (experiments/torchao-float8.yaml runs them)"
    lines, failed = [], False
    for shape in dict.fromkeys(_shape(r) for r in cells):
        sides = {r["precision"]: r for r in cells if _shape(r) == shape}
        bf16 = sides.get("bf16")
        if bf16 is None or bf16["status"] != "ok":
            failed = True
            lines.append(f"{shape}: bf16 {bf16 and bf16['status']}")
            continue
        ratios = [f"{mode} {_over(cell, bf16)}" for mode, cell in sides.items() if mode != "bf16"]
        failed |= any(cell["status"] not in ("ok", "skipped") for cell in sides.values())
        published = PUBLISHED.get(shape)
        beside = f" (published {published:.2f}x on an {PUBLISHED_ON})" if published else ""
        lines.append(f"M, K, N = {', '.join(map(str, shape))}: {', '.join(ratios)}{beside}")
    return ("FAIL" if failed else "PASS"), what, "; ".join(lines)


def _over(cell: dict, bf16: dict) -> str:
    return f"{cell['throughput'] / bf16['throughput']:.2f}x" if cell["status"] == "ok" else cell["status"]


def check_gpu_work(found: list[dict]) -> Check:
    """Every CUDA training cell that finished traced its GPU's own work: busy time and idle share
    recorded (a kernel benchmark's time is its kernels' already)."""
    ok = [r for r in found if r["status"] == "ok" and r.get("device") == "cuda" and _kind(r) != BENCHMARK]
    if not ok:
        return "n/a", "GPU work traced (busy time, idle share)", "no CUDA cell finished"
    missing = [r["cell_id"] for r in ok if not _number(r.get("gpu_busy_ms_per_step"))]
    idle = sorted(r["gpu_idle_fraction"] for r in ok if _number(r.get("gpu_idle_fraction")))
    spread = f"idle {idle[0]:.0%}-{idle[-1]:.0%}" if idle else "no idle share"
    detail = f"{len(ok) - len(missing)} of {len(ok)} cells, {spread}"
    detail += f"; none in {', '.join(missing[:3])}" if missing else ""
    return ("FAIL" if missing else "PASS"), "GPU work traced (busy time, idle share)", detail


def check_side_by_side(found: list[dict]) -> Check:
    """Issue 36: on a GPU with room for them, the cells of each comparison of the matrix stage
    (experiments/gpu-check.yaml) took turns on it, window by window, their queued kernels drained at
    each handover; each turn's first step untimed."""
    what = "side by side: each comparison's cells took turns on the GPU"
    ok = [r for r in found if r["status"] == "ok" and r.get("matrix") == "gpu-check"]
    compared = [r for r in ok if sum(_same_setup(r, other) for other in ok) >= 2]
    if not compared:
        return "FAIL", what, "no comparison of two ok cells in the matrix stage"
    alone = [r for r in compared if not r.get("side_by_side_id")]
    if alone:
        example = f"{alone[0]['cell_id']}: {alone[0].get('ran_alone')}"
        return "FAIL", what, f"{len(alone)} of {len(compared)} cells alone, e.g. {example}"
    groups = Counter(r["side_by_side_id"] for r in compared)
    spreads = [r["throughput_spread"] for r in compared if _number(r.get("throughput_spread"))]
    spread = f", window spread {min(spreads):.1%}-{max(spreads):.1%}" if spreads else ""
    untimed = sorted({r.get("untimed_steps") for r in compared}, key=str)
    return "PASS", what, f"{len(groups)} comparisons, {len(compared)} cells, untimed steps {untimed}{spread}"


def _same_setup(record: dict, other: dict) -> bool:
    """The same workload, batch size, compile mode and seed: the cells a speed ratio compares (a
    record's config names its precision too)."""
    workload = (record.get("config") or {}).get("workload") == (other.get("config") or {}).get("workload")
    return workload and all(record.get(key) == other.get(key) for key in ("batch_size", "compile", "seed"))


def listed_uuids(work: Path) -> set[str]:
    path = work / "nvidia-smi.txt"
    return set(LISTED_UUID.findall(path.read_text(errors="replace"))) if path.exists() else set()


def check_uuid(found: list[dict], listed: set[str]) -> Check:
    what = "environment.gpu_uuid is the GPU's UUID"
    on_gpu = [r for r in found if r.get("device") == "cuda" and r.get("environment")]
    if not on_gpu:
        return "FAIL", what, "no record from a CUDA cell carries an environment"
    uuids = Counter(str(r["environment"].get("gpu_uuid")) for r in on_gpu)
    malformed = [uuid for uuid in uuids if not UUID.match(uuid)]
    unlisted = [uuid for uuid in uuids if listed and uuid not in listed]
    if malformed or unlisted:
        problems = [f"{u[:60]} is not a UUID" for u in malformed] + [f"{u} not in nvidia-smi -L" for u in unlisted]
        return "FAIL", what, ", ".join(problems)[:300]
    source = "each listed by nvidia-smi -L" if listed else "well formed (nvidia-smi -L listed none)"
    return "PASS", what, f"{len(uuids)} distinct in {len(on_gpu)} records, {source}: {', '.join(uuids)[:100]}"


def machine_line(found: list[dict]) -> str:
    machine = next((r.get("machine") for r in found if r.get("machine")), None) or {}
    return (
        f"machine: {machine.get('device_name', 'no record names the device')}"
        f" (cc {machine.get('compute_capability', '?')}, driver {machine.get('driver', '?')},"
        f" torch {machine.get('torch', '?')}, CUDA {machine.get('cuda', '?')})"
    )


def stage_exits(work: Path) -> list[tuple[str, int]]:
    path = work / "stages.tsv"
    rows = [line.split("\t") for line in path.read_text().splitlines()] if path.exists() else []
    return [(row[0], int(row[1])) for row in rows if len(row) >= 2 and row[1].lstrip("-").isdigit()]


def checks_block(work: Path, gpus: int | None) -> tuple[str, bool]:
    """The checks and the verdict, and whether everything passed (every stage exit 0 too)."""
    found = records(work)
    checks = [
        check_batch_search(found),
        check_compiled(found),
        check_mfu(found),
        check_ddp_mfu(found, gpus),
        check_energy(found),
        check_time_to_target(found),
        check_side_by_side(found),
        check_gpu_work(found),
        check_fp8(found),
        check_float8_benchmark(found),
        check_uuid(found, listed_uuids(work)),
    ]
    failed_stages = [f"{name} exit {code}" for name, code in stage_exits(work) if code != 0]
    failed_checks = [what for verdict, what, _ in checks if verdict == "FAIL"]
    passed = not failed_stages and not failed_checks
    verdict = "PASS" if passed else "FAIL: " + "; ".join([*failed_stages, *(f"check {c}" for c in failed_checks)])
    lines = [machine_line(found), *(f"{v:4} {what}: {detail}" for v, what, detail in checks), f"gpu-check: {verdict}"]
    return "\n".join(lines), passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    stage = commands.add_parser("stage", help="one stage's block")
    stage.add_argument("work", type=Path)
    stage.add_argument("name")
    stage.add_argument("--exit", type=int, required=True, dest="code")
    stage.add_argument("--wall-s", type=float, required=True)
    stage.add_argument("--budget-s", type=float, required=True)
    stage.add_argument("--estimate-s", type=float, help="the script's estimate of the stage's time")
    stage.add_argument("--matrix", help="the matrix the stage ran (its records are its figures)")
    checks = commands.add_parser("checks", help="the PASS/FAIL lines and the verdict")
    checks.add_argument("work", type=Path)
    checks.add_argument("--gpus", type=int, help="GPUs the machine has")
    checks.add_argument("--rehearsal", action="store_true", help="a CPU rehearsal: print the checks, judge none")
    args = parser.parse_args()
    if args.command == "stage":
        print(stage_block(args.work, args.name, args.code, args.wall_s, args.budget_s, args.matrix, args.estimate_s))
        return 0
    text, passed = checks_block(args.work, args.gpus)
    if args.rehearsal:
        print("rehearsal on the CPU: the checks below are GPU facts, shown and not judged")
    print(text)
    return 0 if passed or args.rehearsal else 1


if __name__ == "__main__":
    raise SystemExit(main())
