"""A local text file as training and validation lines, read only as far as a cell's samples reach.

A cell trains on `samples` blocks of `seq_len` bytes and validates on `val_samples` more. The file
is read one bounded line at a time; each line that is not blank goes to validation with
probability val_fraction (a fixed seed: every cell gets the same split), until both sides hold
the bytes their blocks need or the file ends. A 2 GB corpus so costs what the samples use, a
line too long to deal out is refused at its first MiB, and nothing is cached: reading that much
again is as cheap as a cache would be, and nothing is written outside --out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from amp_suite.files import RefusedFile, open_regular
from amp_suite.paths import shown

MAX_LINE_BYTES = 1 << 20  # prose has paragraphs of a few kB; a longer line is rarely text at all
SPLIT_SEED = 0  # the split never depends on the run's seed


class UnusableText(ValueError):
    """The file can't give a cell its text: missing, not a file, empty, binary, a line too long, too short."""


@dataclass
class Side:
    """One split's lines and what they add up to, once joined by newlines as token_tensors joins them."""

    needed: int  # bytes its blocks take
    lines: list[str] = field(default_factory=list)
    size: int = 0

    def add(self, line: str, size: int) -> None:
        if self.size < self.needed:  # lines past what the blocks take would never be used
            self.lines.append(line)
            self.size += size + 1

    @property
    def full(self) -> bool:
        return self.size > self.needed


def read_text(path: Path, block: int, train_blocks: int, val_blocks: int, val_fraction: float) -> tuple[Side, Side]:
    """(training, validation) lines of the file: enough for `train_blocks` and `val_blocks` blocks of
    `block` bytes where the file holds that much. UnusableText says in one line why not."""
    try:
        with open_regular(path) as handle:
            if handle is None:
                raise UnusableText("does not exist")
            return _deal(handle, Side(block * train_blocks), Side(block * val_blocks), val_fraction, block)
    except RefusedFile as exc:  # a folder, a FIFO, a device: said as such, before a byte is read
        raise UnusableText(
            f"{str(exc).removeprefix(f'{shown(path)}: ')} (data.source text reads one text file)"
        ) from None


def _deal(handle: BinaryIO, train: Side, validation: Side, val_fraction: float, block: int) -> tuple[Side, Side]:
    draws = random.Random(SPLIT_SEED)
    number = 0
    while not (train.full and validation.full) and (raw := handle.readline(MAX_LINE_BYTES + 1)):
        number += 1
        line = _text_of(raw, number)
        if line.strip():
            (validation if draws.random() < val_fraction else train).add(line, len(raw.rstrip(b"\r\n")))
    if not train.lines and not validation.lines:
        raise UnusableText("holds no text")
    if min(train.size, validation.size) <= block:
        raise UnusableText(
            f"too little text: {number} line(s) give training {max(train.size - 1, 0)} bytes and validation"
            f" {max(validation.size - 1, 0)}, each needs at least one block of {block}"
        )
    return train, validation


def _text_of(raw: bytes, number: int) -> str:
    if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):  # readline stopped at the bound
        raise UnusableText(
            f"line {number} is longer than {MAX_LINE_BYTES >> 20} MiB (text is split into training and validation"
            " line by line: break it into lines)"
        )
    if b"\0" in raw:
        raise UnusableText(f"not text (a NUL byte in line {number})")
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise UnusableText(f"not UTF-8 text (line {number})") from None
