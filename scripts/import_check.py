"""Before a short GPU lease spends minutes on gpu-check: does every amp_suite module import in this
Python, and which versions will be measured? Seconds, where a missing or mismatched package would
otherwise fail a stage minutes in. Exits 1, naming each module that failed, when any does.

    python3 scripts/import_check.py
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from importlib import metadata

REPORTED = ("torch", "torchvision", "transformers", "datasets", "mlflow", "torchao", "pydantic", "pyarrow",
            "huggingface-hub", "fsspec", "numpy", "scipy", "sqlalchemy", "nvidia-ml-py", "timm")  # fmt: skip
# Imported lazily by the suite, only where a stage needs them: a plain `import amp_suite` misses them.
LAZY = ("torchao.float8", "mlflow.store.tracking.sqlalchemy_store", "datasets", "pynvml")


def main() -> int:
    for name in REPORTED:
        try:
            print(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            print(f"{name} not installed")
    import amp_suite

    modules = [*LAZY, *(m.name for m in pkgutil.walk_packages(amp_suite.__path__, "amp_suite."))]
    failed = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:
            failed.append(module)
            traceback.print_exc(limit=3)
    import torch

    print(f"python {sys.version.split()[0]}; CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s) visible")
    print(f"{len(modules) - len(failed)} of {len(modules)} modules import" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
