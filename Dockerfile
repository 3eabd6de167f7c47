# amp-suite on an NVIDIA CUDA base image. One file, one image per GPU generation:
#
#   T4, A100, L4, H100, H200, B200 (compute capability 7.5 and newer; the default):
#     docker build -t amp-suite:cu130 .
#   V100 (Volta, 7.0) and older — PyTorch's CUDA 13 wheels no longer carry sm_70:
#     docker build -t amp-suite:cu126 --build-arg CUDA_VERSION=12.6.3 --build-arg TORCH_CUDA=cu126 .
#
#   docker run --gpus all --ipc=host -v "$PWD/runs:/runs" amp-suite:cu130
#
# Python packages come from the same constraints.txt that CI installs, so the image and CI can't
# drift; torch, torchvision and the CUDA wheels they bring come from PyTorch's index for the chosen
# CUDA line (TORCH_INDEX_URL; PyPI's torch is the cu130 build too), pinned by that line's lock
# (locks/<TORCH_CUDA>.txt).
#
# The base is CUDA's slim `base` flavour: torch's wheels carry their own CUDA runtime, cuBLAS,
# cuDNN and NCCL and load those, so the `-cudnn-runtime` image's copies were never used. `base`
# keeps what the NVIDIA container runtime needs (its environment variables, and the forward
# compatibility libraries of the CUDA line). BASE_IMAGE replaces it: CI builds on a Debian
# stand-in (scripts/container-check.sh), since it can't pull NVIDIA's; the image records the base
# it was built on (AMP_SUITE_IMAGE_BASE).
ARG CUDA_VERSION=13.0.2
ARG UBUNTU_VERSION=24.04
ARG BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-base-ubuntu${UBUNTU_VERSION}
FROM ${BASE_IMAGE}

ARG BASE_IMAGE
ARG CUDA_VERSION
ARG TORCH_CUDA=cu130
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_CUDA}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# tini runs as PID 1: it forwards `docker stop`'s SIGTERM to the suite (which then closes its
# MLflow runs and exits 143) and reaps what the suite's worker processes leave behind. wget is
# for KubeRay, whose operator probes a Ray node's health with it (docker/kuberay.yaml).
# DL3008 (pin apt versions) is ignored: the CUDA base image fixes the Ubuntu release, whose archive
# serves one python3; pinning its exact patch version would only break the build on every update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv tini wget \
    && rm -rf /var/lib/apt/lists/*

# A compiler, in a layer of its own (its size shows in `docker history`): torch.compile needs one
# at run time. On a GPU, Triton builds its launcher for every kernel with gcc (or $CC, clang) and
# Python's headers (triton/runtime/build.py); on a CPU, inductor compiles its kernels with g++.
# Without them no compiled cell can run. DL3008 as above: the base's release fixes the versions.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev python3-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/amp-suite
COPY constraints.txt ./
COPY locks ./locks
RUN test -f "locks/${TORCH_CUDA}.txt" || { echo "no lock for TORCH_CUDA=${TORCH_CUDA}: see locks/" >&2; exit 1; } \
    && python3 -m venv /opt/venv \
    && pip install -c constraints.txt -c "locks/${TORCH_CUDA}.txt" \
        --index-url "${TORCH_INDEX_URL}" \
        --extra-index-url https://pypi.org/simple \
        torch torchvision

COPY pyproject.toml README.md ./
COPY amp_suite ./amp_suite
COPY experiments ./experiments
RUN pip install -c constraints.txt -c "locks/${TORCH_CUDA}.txt" ".[ray,timm]"

# Ubuntu images ship a user with UID 1000 (a Debian base has none); replace it so files in the
# /runs volume belong to the usual first user on the host. `docker run --user "$(id -u):$(id -g)"`
# runs as any other host user: that user has no home in the image, so HOME is one anybody can
# write (Triton's and Hugging Face's caches live under it).
ARG UID=1000
RUN (userdel --remove ubuntu 2>/dev/null || true) \
    && useradd --create-home --uid "${UID}" amp \
    && chmod 1777 /home/amp \
    && mkdir -p /runs \
    && chown amp /runs
USER ${UID}
WORKDIR /runs

# The image's identity, copied into every record's environment block. The image exists to measure
# a GPU: without one visible (no --gpus all, a driver too old for its CUDA) `run` stops with an
# error instead of quietly measuring the CPU (--device cpu overrides). GIT_COMMIT is declared
# here, last: a build argument that changes invalidates every RUN after its declaration.
ARG GIT_COMMIT=""
ENV HOME=/home/amp \
    AMP_SUITE_OUT=/runs \
    AMP_SUITE_DEVICE=cuda \
    AMP_SUITE_IMAGE_BASE="${BASE_IMAGE}" \
    AMP_SUITE_IMAGE_CUDA="${CUDA_VERSION}" \
    AMP_SUITE_IMAGE_TORCH_INDEX="${TORCH_CUDA}" \
    AMP_SUITE_IMAGE_TORCH_INDEX_URL="${TORCH_INDEX_URL}" \
    AMP_SUITE_GIT_COMMIT="${GIT_COMMIT}"
VOLUME ["/runs"]

ENTRYPOINT ["/usr/bin/tini", "--", "amp-suite"]
CMD ["run"]
