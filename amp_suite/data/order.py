"""Device-resident training data and a batch order that is identical for every precision.

The whole sample pool is moved to the device before training, and each step gathers its batch
with an index tensor that is also on the device, so no host-to-device copy or loader work sits
in the timed region. The order depends only on the seed, the pool size and the batch size, and
its hash goes into every record so anyone can check two cells saw the same batches.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TensorData:
    inputs: torch.Tensor
    targets: torch.Tensor

    def __len__(self) -> int:
        return len(self.inputs)

    def to(self, device: torch.device, memory_format: torch.memory_format = torch.preserve_format) -> TensorData:
        """On `device`; images (4-D inputs) in `memory_format`."""
        images = self.inputs.dim() == 4
        inputs = self.inputs.to(device, memory_format=memory_format) if images else self.inputs.to(device)
        return TensorData(inputs, self.targets.to(device))


def batch_order(num_samples: int, batch_size: int, num_batches: int, seed: int) -> torch.Tensor:
    """Indices of shape (num_batches, batch_size): reshuffled each epoch, last partial batch dropped."""
    generator = torch.Generator().manual_seed(seed)
    per_epoch = num_samples // batch_size
    epochs = -(-num_batches // per_epoch)  # ceil
    batches = [
        torch.randperm(num_samples, generator=generator)[: per_epoch * batch_size].view(per_epoch, batch_size)
        for _ in range(epochs)
    ]
    return torch.cat(batches)[:num_batches]


def order_hash(order: torch.Tensor) -> str:
    return hashlib.sha256(order.to(torch.int64).numpy().tobytes()).hexdigest()[:16]


GATHER_BYTES = 2**20  # batches gathered at once, by size: ~60 of the smoke MLP's, 1 of an ImageNet ResNet's


class DeviceBatches:
    """Yields (inputs, targets) batches gathered on the device in a fixed order.

    Consecutive batches are gathered together, up to GATHER_BYTES at a time, and handed out as
    views (a chunk of two batches or more; a batch larger than that is gathered alone). A gather
    per step cost the CPU MLP 4-6% of its step in CPU time (scripts/bench_overhead.py's lockstep
    pairs, 2026-12-01), far more than the 12 us the same gather takes in a loop of its own: the
    launch-bound step is the workload most sensitive to work between steps, and the bare loop it
    is compared with has every batch ready. Chunks keep that cost at one gather in sixty there,
    and device memory at two chunks of batches (the one in use, the next), not the whole run's.
    """

    def __init__(self, data: TensorData, order: torch.Tensor, gather_bytes: int = GATHER_BYTES) -> None:
        self.data = data
        self.order = order.to(data.inputs.device)
        self.batch_size = order.shape[1]
        per_sample = data.inputs[0].nbytes + data.targets[0].nbytes
        self.per_gather = max(1, min(len(order), gather_bytes // max(1, per_sample * self.batch_size)))
        self._chunks = self.order.split(self.per_gather)  # split once: no step indexes `order` itself
        self._gathered: tuple[int, torch.Tensor, torch.Tensor] | None = None  # (chunk, inputs, targets)
        self._next = 0

    def peek(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch next() would return, without advancing. Past the order's end (rounds that only
        time, cell.pipeline) it starts over: any batch of the order does for a stopwatch."""
        chunk, offset = divmod(self._next % len(self.order), self.per_gather)
        if self._gathered is None or self._gathered[0] != chunk:
            index = self._chunks[chunk].flatten()
            # Indexing (unlike index_select) keeps the pool's memory format: channels_last stays so.
            self._gathered = chunk, self.data.inputs[index], self.data.targets[index]
        _, inputs, targets = self._gathered
        batch = slice(offset * self.batch_size, (offset + 1) * self.batch_size)
        return inputs[batch], targets[batch]

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = self.peek()
        self._next += 1
        return batch
