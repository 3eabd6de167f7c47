from __future__ import annotations

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


def test_batches_are_gathered_in_order():
    data = TensorData(torch.arange(10).float().unsqueeze(1), torch.arange(10))
    order = batch_order(10, 2, 3, seed=1)
    batches = DeviceBatches(data, order)
    for row in order:
        inputs, targets = batches.next()
        assert torch.equal(targets, row) and torch.equal(inputs.squeeze(1), row.float())
