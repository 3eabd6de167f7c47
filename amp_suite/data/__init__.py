"""Training and validation data: offline sources, a fixed split, device-resident batches."""

from amp_suite.data.order import DeviceBatches, TensorData, batch_order, order_hash

__all__ = ["DeviceBatches", "TensorData", "batch_order", "order_hash"]
