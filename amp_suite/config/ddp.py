"""The data-parallel (DDP) axis of a workload: world sizes and gradient-communication hooks. No torch here.

A workload with a `ddp` block runs each of its cells once per (world size, hook): that many ranks,
one device each (NCCL on GPUs, gloo processes sharing a CPU), every rank at the cell's batch size
(weak scaling: the global batch is world size x batch size). Workloads without the block run as
before, and their cell ids and config hashes do not change.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from amp_suite.config.base import FrozenModel

# How DDP sends gradients: "none" is PyTorch's default, an all-reduce of the float32 gradients;
# fp16/bf16 are its compression hooks (cast to half width, all-reduce, cast back).
COMM_HOOKS = ("none", "fp16", "bf16")
CommHook = Literal[COMM_HOOKS]  # type: ignore[valid-type]
MAX_WORLD_SIZE = 64
WorldSize = Annotated[int, Field(ge=1, le=MAX_WORLD_SIZE, strict=True)]  # strict: `true` is not a size


class DdpConfig(FrozenModel):
    """`ddp: {world_size: [1, 2], comm_hook: [none, fp16]}` on a workload: both are axes."""

    world_size: list[WorldSize] = Field(min_length=1, max_length=16, description="ranks per cell, one device each")
    comm_hook: list[CommHook] = Field(["none"], min_length=1, description="gradient compression: none, fp16, bf16")

    @model_validator(mode="after")
    def _no_repeats(self):
        for axis in ("world_size", "comm_hook"):
            values = getattr(self, axis)
            if len(set(values)) != len(values):
                raise ValueError(f"ddp.{axis} must not repeat: {values}")
        return self

    def cells(self) -> list[DdpCell]:
        return [DdpCell(world_size=n, comm_hook=hook) for n in self.world_size for hook in self.comm_hook]


class DdpCell(FrozenModel):
    """One cell's place on the DDP axes."""

    world_size: WorldSize
    comm_hook: CommHook = "none"

    @property
    def suffix(self) -> str:
        """What the cell id gains: "ddp2", or "ddp2-fp16hook" with a compression hook."""
        return f"ddp{self.world_size}" + ("" if self.comm_hook == "none" else f"-{self.comm_hook}hook")
