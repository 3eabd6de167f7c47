"""A cell's training step op by op (amp_suite.instruments.diagnostics.op_profile), at the cell's own
batch, on this CPU and whatever it is: what a roofline estimate of that step on a GPU needs."""

from __future__ import annotations

import torch

from amp_suite.cell.pipeline import load_cell
from amp_suite.cell.precision import make_policy
from amp_suite.config import CellSpec
from amp_suite.data import TensorData
from amp_suite.instruments.diagnostics.op_costs import StepProfile
from amp_suite.instruments.diagnostics.op_profile import profile_step


def profile_cell(spec: CellSpec) -> StepProfile:
    """The op profile of the cell's workload, precision and batch (the model and its step on fake
    tensors: no arithmetic, seconds even for a ResNet-50 at batch 256 in fp16)."""
    workload, data = load_cell(spec)
    cpu = torch.device("cpu")
    train = data.train
    batch = TensorData(train.inputs[: spec.batch_size], train.targets[: spec.batch_size])
    batch = batch.to(cpu, workload.memory_format)  # one batch in the layout the cell trains in, not the whole set
    # The model stays in its own layout: moving fake parameters to channels_last is refused, and a
    # layout changes neither an op's FLOPs nor its bytes (the roofline does not model what it does
    # to kernels' speed).
    return profile_step(
        lambda: workload.build_model(data.train),
        workload.loss,
        lambda: make_policy(spec.precision, cpu.type),
        workload.make_optimizer,
        batch.inputs,
        batch.targets,
    )
