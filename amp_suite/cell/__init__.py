"""The child side: one cell, measured in the worker's process. `run` turns a spec into a record;
`pipeline` is the measurement sequence single-device cells and DDP ranks share; `loop` is the
article's training step; `precision` the policies; `compilation` the torch.compile axis; `ddp`
the ranks of a multi-GPU cell."""
