"""Your own model, measured by amp-suite: a function that returns an amp_suite.UserWorkload, and is
declared so (`-> UserWorkload`): the suite calls no function of an entry's file that isn't.

    amp-suite run --model examples/cnn.py:build --device cpu
    docker run --gpus all -v "$PWD/examples:/models:ro" -v "$PWD/runs:/runs" IMAGE run --model /models/cnn.py:build

This one is a small CNN with its own data: 8x8 images of 4 classes, each class a brighter quadrant.
The entry runs in each cell's process after the cell's seed is set, so every precision starts from
the same weights; keep the data the same for every call (its own generator, or a file).
"""

import torch
from torch import nn

from amp_suite import UserWorkload


def images(count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, 4, (count,), generator=generator)
    pixels = torch.randn(count, 1, 8, 8, generator=generator) * 0.5
    for quadrant in range(4):
        rows, cols = divmod(quadrant, 2)
        pixels[labels == quadrant, :, rows * 4 : rows * 4 + 4, cols * 4 : cols * 4 + 4] += 1.0
    return pixels, labels


def build(channels: int = 16) -> UserWorkload:
    model = nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(4 * channels, 4),
    )  # fmt: skip
    data = torch.Generator().manual_seed(1234)
    return UserWorkload(
        model,
        train=images(2048, data),
        validation=images(512, data),
        # The defaults, spelled out: cross-entropy over logits, accuracy (higher is better), AdamW.
        loss=nn.functional.cross_entropy,
        metric_name="accuracy",
        higher_is_better=True,
    )
