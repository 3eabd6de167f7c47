"""`amp-suite predict`'s tables: each mode's estimate on a GPU (behind a good host and a slow one),
beside what a run measured, beside what was published; and the lines that name the host-bound cells."""

from __future__ import annotations

import functools

from rich import box
from rich.table import Table

from amp_suite.analysis.words import times
from amp_suite.cli.common import EXPERIMENTS_DIR, console, say
from amp_suite.config import ConfigError, load_matrix
from amp_suite.report.predict_plan import config_of
from amp_suite.report.references import same_config
from amp_suite.text import plain

TEXT_COLUMNS = ("workload", "mode", "bound", "model", "speedup", "M, K, N")  # left-aligned, as is any "bound ..."


def _table(headers: list[str]) -> Table:
    """A table that fits an 80-column terminal: a rule under the header, no vertical lines, numbers'
    headers wrapping where they must, and never a cut workload's name (rich squeezes each column)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for header in headers:
        left = header in TEXT_COLUMNS or header.startswith("bound")
        table.add_column(header, justify="left" if left else "right", no_wrap=left)
    return table


def _show(title: str, table: Table) -> None:
    """The title as a line of its own (wrapped at the terminal, not at the table's width), then the table."""
    say(title)
    console.print(table)


def _say_dominant_ops(estimates) -> None:
    """The ops that take most of each estimated step, below its table rather than as a column of it:
    one line per distinct list, naming the modes it holds for where it holds for every cell of them."""
    by_ops: dict[str, list] = {}
    for estimate in estimates:
        by_ops.setdefault(", ".join(estimate.step.dominant_names()), []).append(estimate)
    for ops, holding in by_ops.items():
        modes = list(dict.fromkeys(estimate.precision for estimate in holding))
        whole_modes = all(estimate in holding for estimate in estimates if estimate.precision in modes)
        where = ", ".join(modes) if whole_modes else "; ".join(
            f"{plain(e.label)} at batch {e.batch} {e.precision}" for e in holding)
        say(f"dominant ops ({where}): {plain(ops)}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def print_estimates(title: str, estimates, speedups: dict, slow=None) -> None:
    """A row per estimate; `speedups`: per baseline, each estimate's Estimated (or None), in order.
    `slow`: (the slow host, the same cells' estimates behind it, their speedups over the first
    baseline), shown beside: the other end of the range of hosts."""
    first = next(iter(speedups), "")  # the baseline of the slow host's speedups
    baselines = [b for b, rows in speedups.items() if any(rows)]  # one this GPU has no estimate against: no column
    slow_speedups = slow is not None and any(slow[2])
    # headers broken by hand: the table fits 80 columns without cutting a figure
    headers = ["workload", "batch", "mode", "step\nms", *(f"vs\n{b}" for b in baselines), "bound"]
    if slow is not None:  # its speedup and bound: its step is the baseline's over the speedup
        host = f"at {slow[0].launch_us:g} µs"
        headers += [f"vs {first}\n{host}"] * slow_speedups + [f"bound\n{host}"]
    table = _table(headers)
    for index, estimate in enumerate(estimates):
        against = [times(row.estimated if row else None) for row in (speedups[b][index] for b in baselines)]
        cells = [_ms(estimate.step.seconds), *against, estimate.step.bound]
        if slow is not None:
            behind, found = slow[1][index], slow[2][index]
            cells += [times(found.estimated if found else None)] * slow_speedups + [behind.step.bound]
        table.add_row(plain(estimate.label), str(estimate.batch), estimate.precision, *cells)
    _show(title, table)
    _say_dominant_ops(estimates)


def print_measured(title: str, estimates, found: list, measured_steps: list) -> None:
    """A row per estimate of a run's cell, beside the speedup its records measured over the same
    baseline (`found`: each estimate's Estimated, or None for the baseline) and the step they
    measured (`measured_steps`, ms or None), with the two sides of the estimated step: the GPU's
    work and the host's launches."""
    baseline = next((row.baseline for row in found if row), "")
    headers = ["workload", "batch", "mode", "est.\nstep ms", f"measured\nvs {baseline}", f"estimated\nvs {baseline}",
               "error", "bound", "GPU\nms", "launches ms\n(kernels)", "measured\nstep ms"]  # fmt: skip
    table = _table(headers)
    for estimate, row, measured_step in zip(estimates, found, measured_steps, strict=True):
        step = estimate.step
        error = f"{row.error:+.0%}" if row and row.error is not None else "-"
        table.add_row(plain(estimate.label), str(estimate.batch), estimate.precision, _ms(step.seconds),
                      times(row.measured if row else None), times(row.estimated if row else None), error, step.bound,
                      _ms(step.gpu_seconds), f"{_ms(step.host_seconds)} ({step.kernels})",
                      "-" if measured_step is None else f"{measured_step:.3g}")  # fmt: skip
    _show(title, table)
    _say_dominant_ops(estimates)


def _host_bound(estimates) -> str:
    """The host-bound cells, each with its modes; or "none"."""
    by_cell: dict[tuple, list[str]] = {}
    for estimate in estimates:
        if estimate.host_bound:
            by_cell.setdefault((estimate.label, estimate.batch), []).append(estimate.precision)
    which = "; ".join(f"{plain(label)} at batch {batch}: {', '.join(modes)}"
                      for (label, batch), modes in by_cell.items())  # fmt: skip
    return which or "none"


def say_host_bound_range(where: str, behind: list) -> None:
    """Which of the estimated cells come out host-bound behind each host of a range, in one line, if
    any does: `behind`, (a host, the estimates behind it) for each."""
    each = "; ".join(f"behind {host.name}: {which}" for host, estimates in behind
                     if (which := _host_bound(estimates)) != "none")  # fmt: skip
    if each:  # else the table's bounds say it: none is
        say(f"host-bound on {where} (its launches outlast the GPU's work) {each}")


def say_host_bound(where: str, estimates, host: str = "") -> None:
    """Which of the estimated cells come out host-bound: the host's launches outlast the GPU's work.
    `host`: the host in words, where it is not the figure every estimate assumed."""
    which = _host_bound(estimates)
    figures = {f"{estimate.step.launch_us:g} µs a kernel" for estimate in estimates}
    behind = host or (figures.pop() if len(figures) == 1 else "each cell's host (above)")
    say(f"host-bound on {where} behind {behind} (launching the kernels takes longer than the GPU's work): "
        f"{which}")  # fmt: skip


def say_windows_set_aside(rows, chosen: dict) -> None:
    """The windows left out of the measured speedups of the cells estimated (summary rows; `chosen`
    holds their (machine, setup, mode)): a hiccup's, or one the file held that no cell measures
    (records.results reads such a window as set aside)."""
    for row in rows:
        if (row.machine, row.setup, row.precision) in chosen:
            for window in row.set_aside:
                say(f"measured {plain(row.workload)} {row.precision}: {window}")


def print_float8_benchmark(rows: list) -> None:
    """A row per published float8 benchmark figure (predict_plan.Float8Row), beside its estimate."""
    first_gpu = rows[0].gpu
    title = (f"torchao's float8 single linear on {first_gpu.name} ({first_gpu.memory_gbps:g} GB/s, as published): "
             "fp8-tensorwise vs bf16, compiled, GPU kernel time")  # fmt: skip
    table = _table(["M, K, N", "published", "estimated", "error", "bf16 µs", "fp8 µs", "bound of fp8"])
    for row in rows:
        shape, c = row.shape, row.calibration
        bf16, fp8 = row.steps.values()
        table.add_row(", ".join(map(str, shape)), f"{c.published.value:.2f}x", f"{c.estimated:.2f}x", f"{c.error:+.0%}",
                      f"{bf16.seconds * 1e6:.4g}", f"{fp8.seconds * 1e6:.4g}", fp8.bound)  # fmt: skip
    _show(title, table)
    by_ops: dict[str, list[str]] = {}
    for row in rows:
        by_ops.setdefault(", ".join(list(row.steps.values())[1].dominant_names()), []).append(
            ", ".join(map(str, row.shape)))
    for ops, shapes in by_ops.items():
        say(f"fp8's dominant ops ({'; '.join(shapes) if len(by_ops) > 1 else 'every shape'}): {plain(ops)}")


def print_calibrations(gpu: str, calibrations) -> None:
    lacking = [c for c in calibrations if c.estimated is None]
    if lacking:
        models = ", ".join(sorted({c.published.model for c in lacking}))
        shipped = ", ".join(_shipped_matrices_with([c.published for c in lacking])) or "none shipped"
        say(f"{len(lacking)} published speedup(s) on {gpu} ({models}) need cells this matrix lacks"
            f" (matrices that have them: {shipped})")  # fmt: skip
    calibrations = [c for c in calibrations if c.estimated is not None]
    if not calibrations:
        return
    table = _table(["model", "speedup", "published", "estimated", "error"])
    for c in calibrations:
        p = c.published
        model = plain(f"{p.model} ({p.gpu})")  # one product's two memory sizes are two figures
        table.add_row(model, f"{p.precision} vs {p.baseline}", f"{p.value:.2f}x", f"{c.estimated:.2f}x",
                      f"{c.error:+.0%}")  # fmt: skip
    _show(f"Published speedups on {gpu}, and the estimate's", table)


def _shipped_matrices_with(figures) -> list[str]:
    """The shipped matrices with a cell of any of the published figures' configurations and batches."""
    wanted = [(figure.config, figure.config.get("batch_size")) for figure in figures]

    def has(cells: list) -> bool:
        return any(batch == want and same_config(config, figure) for config, batch in cells for figure, want in wanted)

    return [name for name, cells in _shipped_cells() if has(cells)]


@functools.cache
def _shipped_cells() -> tuple[tuple[str, list[tuple[dict, object]]], ...]:
    """Each shipped matrix's cells as (config, batch), read once however many GPUs ask."""
    found = []
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        try:
            cells = load_matrix(path).cells("cpu", force=True)
        except ConfigError:  # one the suite can't load here (its own files elsewhere): not a suggestion
            continue
        found.append((path.stem, [(config_of(spec), spec.batch_size) for spec in cells]))
    return tuple(found)
