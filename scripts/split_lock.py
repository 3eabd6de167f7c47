#!/usr/bin/env python3
"""Split a `pip freeze` into the pins every install shares and the pins of one CUDA line.

torch's CUDA builds differ in more than torch: each line brings its own CUDA, cuDNN, NCCL and
Triton wheels under other names and versions (nvidia-*-cu12 for 12.x, cuda-toolkit 13 and
nvidia-*-cu13 for 13.x). Kept in the shared constraints.txt, one line's pins would make every
other line's resolve fail or fall back to the wrong build, so they go to locks/<line>.txt.

    pip freeze --exclude-editable | python scripts/split_lock.py cu130 --shared   # make lock
    pip freeze --exclude-editable | python scripts/split_lock.py cu126            # make lock-line
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED_HEADER = """\
# Exact versions of everything but the CUDA line (torch and the CUDA wheels it brings: locks/).
# CI: pip install -c constraints.txt -c locks/cu130.txt -e '.[dev]'; the image: the same with its line.
# Regenerate after changing dependencies in pyproject.toml: make lock
"""
LINE_HEADER = """\
# The {line} line: torch, torchvision and the CUDA, cuDNN, NCCL and Triton wheels they bring.
# Install with: -c constraints.txt -c locks/{line}.txt --index-url https://download.pytorch.org/whl/{line}
# Written by `make lock` (scripts/split_lock.py); never edit one line's pins from another's resolve.
"""


def cuda_line_package(name: str) -> bool:
    """torch's own build and the wheels that only a CUDA line brings (NVML's bindings are neither)."""
    name = re.sub(r"[-_.]+", "-", name).lower()
    if name == "nvidia-ml-py":
        return False
    return name in {"torch", "torchvision", "triton"} or name.startswith(("nvidia-", "cuda-"))


def split(freeze: list[str]) -> tuple[list[str], list[str]]:
    pins = sorted((line.strip() for line in freeze if line.strip() and not line.startswith("#")), key=str.lower)
    line_pins = [pin for pin in pins if cuda_line_package(re.split(r"[=<>!~ @]", pin, maxsplit=1)[0])]
    return [pin for pin in pins if pin not in line_pins], line_pins


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("line", help="the CUDA line the freeze was resolved for, e.g. cu130")
    parser.add_argument("--shared", action="store_true", help="also rewrite constraints.txt from this freeze")
    args = parser.parse_args()
    shared, line_pins = split(sys.stdin.read().splitlines())
    (ROOT / "locks" / f"{args.line}.txt").write_text(LINE_HEADER.format(line=args.line) + "\n".join(line_pins) + "\n")
    print(f"locks/{args.line}.txt: {len(line_pins)} pins")
    if args.shared:
        (ROOT / "constraints.txt").write_text(SHARED_HEADER + "\n".join(shared) + "\n")
        print(f"constraints.txt: {len(shared)} pins")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
