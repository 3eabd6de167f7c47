from __future__ import annotations

import pytest
import torch

from amp_suite.data import DeviceBatches, TensorData, batch_order, order_hash


def test_order_depends_only_on_its_arguments():
    first, again = batch_order(100, 8, 30, seed=3), batch_order(100, 8, 30, seed=3)
    assert torch.equal(first, again) and order_hash(first) == order_hash(again)
    assert order_hash(batch_order(100, 8, 30, seed=4)) != order_hash(first)


def test_each_epoch_is_a_permutation_without_the_last_partial_batch():
    order = batch_order(10, 3, 6, seed=0)  # 3 batches per epoch, 1 sample dropped each epoch
    assert order.shape == (6, 3)
    for epoch in (order[:3], order[3:]):
        values = epoch.flatten().tolist()
        assert len(set(values)) == 9 and set(values) <= set(range(10))
    assert not torch.equal(order[:3], order[3:])  # reshuffled


@pytest.mark.parametrize("gather_bytes", [1, 3 * 2 * 12, 2**20])  # a batch at a time, 3 at a time, all 7
def test_batches_are_gathered_in_order(gather_bytes):
    data = TensorData(torch.arange(10).float().unsqueeze(1), torch.arange(10))  # 4 + 8 bytes a sample
    order = batch_order(10, 2, 7, seed=1)
    batches = DeviceBatches(data, order, gather_bytes)
    assert batches.per_gather == {1: 1, 72: 3, 2**20: 7}[gather_bytes]
    for row in order:
        peeked = batches.peek()
        inputs, targets = batches.next()
        assert torch.equal(targets, row) and torch.equal(inputs.squeeze(1), row.float())
        assert torch.equal(peeked[1], targets)


def test_a_wide_vector_column_converts_from_arrow_at_once_not_row_by_row():
    """gpu-check's fp8 stage trains on 16,384 vectors of 4,096: np.asarray over the column built a
    Python list per row first (28 s to build the set, 10 s to reload it, here). The same column
    through datasets' numpy format, timed against that path in the same process."""
    import time

    import datasets
    import numpy as np

    from amp_suite.data.convert import vector_tensors

    rows = np.random.default_rng(0).random((2000, 2048), dtype=np.float32)
    split = datasets.Dataset.from_dict({"features": rows, "label": np.arange(2000) % 10})
    clock = time.perf_counter()
    data = vector_tensors(split, limit=2000)
    converted = time.perf_counter() - clock
    clock = time.perf_counter()
    np.asarray(split["features"], dtype=np.float32)  # the way it was
    listed = time.perf_counter() - clock
    assert torch.equal(data.inputs, torch.from_numpy(rows)) and data.targets.dtype == torch.int64
    assert converted < listed / 5, (converted, listed)  # 0.01 s against 0.45 s here
