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


class DeviceBatches:
    """Yields (inputs, targets) batches gathered on the device in a fixed order."""

    def __init__(self, data: TensorData, order: torch.Tensor) -> None:
        self.data = data
        self.order = order.to(data.inputs.device)
        # Split once, so a step does not index `order` first (measured per step on this CPU: 20 us
        # for the gather from `order`, 8-12 us from a pre-split row, of a 2.4 ms MLP step).
        self._rows = self.order.unbind(0)
        self._next = 0

    def peek(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch next() would return, without advancing."""
        index = self._rows[self._next]
        # Indexing (unlike index_select) keeps the pool's memory format: channels_last stays so.
        return self.data.inputs[index], self.data.targets[index]

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = self.peek()
        self._next += 1
        return batch
