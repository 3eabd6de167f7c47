"""A stand-in for a GPU's memory on a CPU, loaded as sitecustomize by every process of a run
(PYTHONPATH=scripts/simulated_memory): while a cell measures, every tensor storage it creates counts
until it is freed, and past DEVICE_BYTES an allocation raises CUDA's out-of-memory error. The batch
search (`batch_sizes: [auto]`) then meets a real torch.OutOfMemoryError, as on a GPU, and autocast's
half-width activations fit a larger batch, as on a GPU. The device also claims bf16 support, so bf16
probes run. Used by tests/unit/execution/test_batch_search.py and by `scripts/gpu-check.sh --rehearse`.
"""

import os
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import amp_suite.cell.run
import amp_suite.execution.batch_search
from amp_suite.records.machine import cpu_caps

BUDGET = int(os.environ["DEVICE_BYTES"])
amp_suite.execution.batch_search.unsupported_reason = lambda device: None
amp_suite.cell.run.probe = lambda device: cpu_caps("simulated device", frozenset({"avx512_bf16"}))


class DeviceMemory(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live, self.used = {}, 0

    def free(self, key):
        self.used -= self.live.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in self.live and storage.nbytes():  # views share their base's
                self.live[storage.data_ptr()] = storage.nbytes()
                self.used += storage.nbytes()
                weakref.finalize(storage, self.free, storage.data_ptr())
        if self.used > BUDGET:
            raise torch.OutOfMemoryError(f"CUDA out of memory: {self.used} bytes live of {BUDGET} (simulated)")
        return out


real_measure = amp_suite.cell.run.measure


def measure(spec, device, progress, **options):
    with DeviceMemory():
        return real_measure(spec, device, progress, **options)


amp_suite.cell.run.measure = measure
