"""The default matrix fits the smallest GPU it is sized for (16 GB; a T4 offers 15 GiB): every
fp32 cell's training memory — the activations autograd saves, weights, gradients and optimizer
state, and the training pool the suite keeps on the device — counted on the meta device, where
tensors have shapes but no storage and nothing is computed. Each arm is counted: eager or under
CUDA graphs, with torch's default optimizer or the fused one.

Under CUDA graphs (compile: reduce-overhead) the count assumes what inductor saves for the backward
is no more than eager autograd saves (its partitioner saves fewer tensors and recomputes cheap
ops), and adds what eager training gets for free: the graphs' private memory pool, which holds the
activations, can't lend its freed blocks to the optimizer's step outside the graph, so that step's
temporaries come on top. Not yet measured on a GPU."""

from __future__ import annotations

import pytest
import torch
from conftest import REPO

from amp_suite.cell import compilation
from amp_suite.config import load_matrix
from amp_suite.data import TensorData
from amp_suite.workloads import build_workload

GiB = 2**30
# Of a T4's 15 GiB: the CUDA context (~0.5 GiB), cuDNN's workspace and the caching allocator's
# fragmentation need the rest.
BUDGET = 12 * GiB
OPTIMIZER_STATES = {"resnet": 1, "transformer": 2, "mlp": 2}  # SGD momentum; AdamW's two moments
# Weight-sized temporaries of one optimizer step: foreach AdamW's square root of its second moment
# (torch/optim/adamw.py, _multi_tensor_adamw); a fused kernel keeps them in registers.
STEP_TEMPORARIES = {False: 1, True: 0}  # by fused_optimizer


def _meta_batch(spec) -> TensorData:
    config = spec.workload
    if spec.workload.workload == "transformer":
        tokens = torch.empty(spec.batch_size, config.seq_len, dtype=torch.long, device="meta")
        return TensorData(tokens, tokens)
    if spec.workload.workload == "resnet":
        images = torch.empty(spec.batch_size, 3, config.image_size, config.image_size, device="meta")
        return TensorData(images, torch.empty(spec.batch_size, dtype=torch.long, device="meta"))
    vectors = torch.empty(spec.batch_size, 64, device="meta")  # digits: 8 x 8 pixels
    return TensorData(vectors, torch.empty(spec.batch_size, dtype=torch.long, device="meta"))


def fp32_training_bytes(spec) -> int:
    workload = build_workload(spec.workload)
    batch = _meta_batch(spec)
    with torch.device("meta"):
        model = workload.build_model(batch)
    saved: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel() * tensor.element_size())  # counted per save: an upper bound
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        workload.loss(model, batch.inputs, batch.targets)
    weights = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
    state = weights * (2 + OPTIMIZER_STATES[spec.workload.workload])  # weights, gradients, optimizer
    outside_the_graphs = weights * STEP_TEMPORARIES[spec.workload.fused_optimizer] if _graphed(spec) else 0
    per_sample = batch.inputs[0].numel() * batch.inputs.element_size()
    pool = (spec.workload.samples or 0) * per_sample
    return sum(saved) + state + outside_the_graphs + pool


def _graphed(spec) -> bool:
    return compilation.uses_cuda_graphs(spec.compile)


def _arm(spec) -> str:
    """What sets a cell's memory apart: its workload's shape and batch, compile mode and optimizer."""
    optimizer = "fused" if spec.workload.fused_optimizer else "default-optimizer"
    return f"{spec.workload.workload}-bs{spec.batch_size}-{spec.compile}-{optimizer}"


DEFAULT_MATRIX = load_matrix(REPO / "experiments" / "default.yaml")
DEFAULT = [cell for cell in DEFAULT_MATRIX.cells("cuda") if cell.precision == "fp32"]
ARMS = {_arm(spec): spec for spec in DEFAULT}


@pytest.mark.parametrize("spec", ARMS.values(), ids=ARMS)
def test_every_default_fp32_cell_fits_a_16_gb_gpu(spec):
    needed = fp32_training_bytes(spec)
    print(f"{_arm(spec)}: {needed / GiB:.1f} GiB")
    assert needed < BUDGET, f"{spec.cell_id} needs about {needed / GiB:.1f} GiB in fp32"


def test_every_arm_of_the_default_matrix_is_counted():
    """The LM and the MLP eager and under CUDA graphs, with the fused optimizer and without."""
    for workload in ("transformer", "mlp"):
        for arm in ("off-default-optimizer", "off-fused", "reduce-overhead-fused"):
            assert any(name.startswith(workload) and name.endswith(arm) for name in ARMS), (workload, arm)


def test_cuda_graphs_add_the_optimizers_temporaries_unless_it_is_fused():
    """The same LM under CUDA graphs needs one weight-sized temporary more with foreach AdamW."""
    (graphed,) = [spec for name, spec in ARMS.items() if name.startswith("transformer") and _graphed(spec)]
    foreach = graphed.model_copy(update={"workload": graphed.workload.model_copy(update={"fused_optimizer": False})})
    eager = graphed.model_copy(update={"compile": "off"})
    weights = 4 * (12 * 12 * 768**2 + (32768 + 512) * 768)  # GPT-2 small's float32 weights, about 0.4 GiB
    assert fp32_training_bytes(graphed) == fp32_training_bytes(eager)
    assert fp32_training_bytes(foreach) - fp32_training_bytes(graphed) == pytest.approx(weights, rel=0.01)


def test_the_count_would_catch_the_sizes_the_matrix_had_before():
    """resnet at 128 and the transformer at 16 sequences, the old defaults, do not fit."""
    old = {"resnet": 128, "transformer": 16}
    for spec in DEFAULT:
        if spec.workload.workload in old:
            before = spec.model_copy(update={"batch_size": old[spec.workload.workload]})
            assert fp32_training_bytes(before) > BUDGET, spec.workload.workload
