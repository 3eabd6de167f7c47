"""The wheels that turn an offline GPU box's Python into one that runs the suite and gpu-check.

For a box whose image already has PyTorch (a cloud's or NVIDIA's) but reaches no package index: run
this where pip reaches one, carry DIR over, and install on the box with the line it prints. The box's
own torch and torchvision are the ones measured, so they, triton and the nvidia-* libraries are never
fetched, nor anything the box already has (HAVE: its `python3 -m pip list --format=freeze`, or one
name a line).

    python scripts/offline_wheels.py DIR [--have HAVE] [--python-version 3.12]

The rest of pyproject.toml's dependencies, and what gpu-check needs beside them (timm, pytest), are
resolved under constraints.txt for that Python on manylinux x86-64, and each wheel is fetched on its
own (--no-deps), so nothing the box has is replaced.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
THE_BOXS_OWN = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-(?!ml-py$).*)$")  # CUDA wheels, not NVML
# What gpu-check needs beyond the dependencies: its probe imports every module (the timm workload's too),
# and its gpu-tests stage runs pytest under the project's per-test timeout.
FOR_GPU_CHECK = ("timm", "pytest", "pytest-timeout")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def name_of(spec: str) -> str:
    """"mlflow>=3.5,<4" (a requirement) or "MLflow==3.17.2" (a freeze line) -> "mlflow"."""
    return canonical(re.split(r"[<>=!~ ;\[]", spec, maxsplit=1)[0])


def names_in(have: Path) -> set[str]:
    """Package names from `pip list --format=freeze` lines (name==version) or one name a line."""
    lines = (line.strip() for line in have.read_text().splitlines())
    return {name_of(line) for line in lines if line and line[0].isalnum()}


def dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = [spec for specs in project["optional-dependencies"].values() for spec in specs]
    declared = project["dependencies"] + [spec for spec in optional if name_of(spec) in FOR_GPU_CHECK]
    return [spec for spec in declared if not THE_BOXS_OWN.match(name_of(spec))]


def target_python(python_version: str) -> list[str]:
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    return ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", *platforms]


def resolve(requirements: list[str], python_version: str) -> dict[str, str]:
    """name -> version of everything `requirements` needs on that Python, as pip would install it."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed"]
        where = ["--report", str(report), "--target", str(Path(scratch) / "site"), "-c", str(ROOT / "constraints.txt")]
        subprocess.run([*pip, *where, *target_python(python_version), *requirements], check=True)
        installs = json.loads(report.read_text())["install"]
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="where the wheels go")
    parser.add_argument("--have", type=Path, help="the box's `pip list --format=freeze`: these are not fetched")
    parser.add_argument("--python-version", default="3.12", help="the box's Python (default 3.12, NVIDIA's images)")
    args = parser.parse_args()

    have = names_in(args.have) if args.have else set()
    needed = {
        name: version
        for name, version in resolve(dependencies(), args.python_version).items()
        if name not in have and not THE_BOXS_OWN.match(name)
    }
    args.dir.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={version}" for name, version in sorted(needed.items())]
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(args.dir)]
    subprocess.run([*download, *target_python(args.python_version), *pins], check=True)
    size = sum(f.stat().st_size for f in args.dir.glob("*.whl")) / 2**20
    print(f"{len(pins)} wheels, {size:.0f} MiB, in {args.dir}: {' '.join(pins)}")
    print("on the box, from the checkout (then scripts/import_check.py, then scripts/gpu-check.sh):")
    print(
        f"  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site {args.dir}/*.whl"
        ' && export PYTHONPATH="/tmp/site:$PWD" PYTHON=python3'
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
