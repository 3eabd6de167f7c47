"""FIXTURE records for the summary, answer and report tests: every GPU record here is made up to
exercise the logic (its host is named "fixture-..."), not a measurement; none of it ships as a result."""

from __future__ import annotations

import itertools

from amp_suite.config import Matrix, ParityConfig
from amp_suite.records.machine import Machine
from amp_suite.records.results import CellRecord

A100 = Machine(
    device_type="cuda", device_name="NVIDIA A100-SXM4-80GB", compute_capability="8.0", driver="550.54",
    cuda="12.8", torch="2.14.1", host="fixture-a100", tensor_cores=True, fast_fp16=True, fast_bf16=True, tf32=True,
)  # fmt: skip
V100 = Machine(
    device_type="cuda", device_name="Tesla V100-SXM2-16GB", compute_capability="7.0", driver="550.54",
    cuda="12.8", torch="2.14.1", host="fixture-v100", tensor_cores=True, fast_fp16=True, fast_bf16=False, tf32=False,
)  # fmt: skip
CPU = Machine(
    device_type="cpu", device_name="Fixture CPU", torch="2.14.1", host="fixture-cpu",
    tensor_cores=False, fast_fp16=False, fast_bf16=True, tf32=False,
)  # fmt: skip
FIXTURE_IDS = itertools.count()  # record ids, unique across every fixture


def rn50(channels_last: bool, batch: int = 256, label: str | None = None) -> dict:
    return {
        "workload": "resnet", "label": label or ("rn50-nhwc" if channels_last else "rn50-nchw"), "arch": "resnet50",
        "image_size": 224, "num_classes": 1000, "channels_last": channels_last, "batch_sizes": [batch],
        "samples": 512, "data": {"source": "synthetic"},
    }  # fmt: skip


MLP = {"workload": "mlp", "hidden": 32, "depth": 2, "batch_sizes": [64], "samples": 256}
STEADY = (0.99, 1.01, 1.0, 0.995, 1.005, 1.0)  # six windows of a quiet machine's timed steps, relative
GPU_BOUND_IDLE = 0.05  # a GPU record's idle share unless `idle=` says otherwise: the GPU set the pace


def records(machine: Machine, workload: dict, results: dict[str, list[tuple[float, float]]], **extra) -> list:
    """FIXTURE records: precision -> [(throughput in samples/s, validation accuracy) per seed], each
    with six windows around its throughput (`windows=`: their factors; STEADY by default); on a GPU,
    with its traced work per step, the GPU idle `idle=` of the step (GPU_BOUND_IDLE by default)."""
    repeats = max(len(seeds) for seeds in results.values())
    spec = {"name": "fixture", "steps": 10, "repeats": repeats, "precisions": list(results), "workloads": [workload]}
    cells = Matrix.model_validate(spec).cells(machine.device_type, force=True)
    made = []
    for cell in cells:
        seeds = results[cell.precision]
        if cell.seed >= len(seeds):
            continue
        throughput, accuracy = seeds[cell.seed]
        step_ms = 1000 * cell.batch_size / throughput
        idle = extra.get("idle", GPU_BOUND_IDLE) if machine.device_type == "cuda" else None
        traced = {} if idle is None else {"gpu_busy_ms_per_step": step_ms * (1 - idle), "gpu_idle_fraction": idle}
        made.append(
            CellRecord.for_spec(
                cell, "ok", record_id=f"fixture-{next(FIXTURE_IDS)}", machine=machine, parity_rule=ParityConfig(),
                throughput=throughput, step_time_ms_p50=step_ms, **traced,
                throughput_windows=[throughput * f for f in extra.get("windows", STEADY)],
                val_metric=accuracy, val_metric_name="val_accuracy",
                val_higher_is_better=True, peak_memory_mb=extra.get("memory", {}).get(cell.precision, 1000.0),
                grad_underflow_fraction=extra.get("underflow"), matmul_flop_share=extra.get("share"),
            )  # fmt: skip
        )
    return made


def three(throughput: float, accuracy: float = 0.9) -> list[tuple[float, float]]:
    """Three seeds with a little spread, so parity has a noise floor and speedups an interval."""
    return [(throughput * f, accuracy + d) for f, d in ((0.99, -0.002), (1.0, 0.0), (1.01, 0.002))]
