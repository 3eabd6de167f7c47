# Set-up and everyday commands. Everything installs into .venv from the pinned constraints.txt
# plus the CUDA line's lock (locks/cu130.txt: PyPI's torch is the CUDA 13.0 build).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= runs
TORCH := torch==2.14.1
TORCHVISION := torchvision==0.29.1
LOCKS := -c constraints.txt -c locks/cu130.txt
# make test's floor for its own line coverage (measured: 91.1%); the whole suite's, after make
# test-slow, is pyproject.toml's fail_under. docs/development.md gives both measurements.
EVERYDAY_FLOOR := 89

.PHONY: install run test test-slow lint ui lock lock-line container-check gpu-check-rehearsal

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt locks/cu130.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile $(LOCKS) -e '.[dev,ray,timm]'
	@# The bytecode pip would write one file at a time (a minute here), on every core instead: processes
	@# must find it written, where PYTHONDONTWRITEBYTECODE is set. Like pip's, it passes over the files
	@# this Python can't compile (torch ships a helper in Python 3.12 syntax).
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	touch $@

run: install  ## the matrix that fits this machine (GPU: default.yaml, else smoke.yaml) into $(OUT)/
	$(BIN)/amp-suite run --out $(OUT)

test: install  ## the everyday suite, under 10 minutes on 2 cores: every test not marked slow or alone, a worker per core, then amp_suite/'s line coverage over every process, with its floor
	rm -rf .coverage-data
	$(BIN)/python -m coverage run -m pytest -n auto --dist loadgroup -m "not slow and not alone" --durations=12
	$(BIN)/python -m coverage combine --quiet
	$(BIN)/python scripts/coverage_report.py --floor $(EVERYDAY_FLOOR) --suite "the everyday suite"

test-slow: install  ## what CI runs after make test: the tests marked slow (a worker per core, shared fixtures once), then those marked alone, one at a time; then the whole suite's coverage, counted with make test's
	$(BIN)/python -m coverage run -m pytest -n auto --dist loadgroup -m "slow and not alone" --durations=12
	$(BIN)/python -m coverage run -m pytest -m alone --durations=8
	$(BIN)/python -m coverage combine --quiet --append
	$(BIN)/python scripts/coverage_report.py --suite "the whole suite"

lint: install
	$(BIN)/ruff check amp_suite tests scripts examples
	$(BIN)/hadolint Dockerfile mlflow/Dockerfile

ui: install
	$(BIN)/amp-suite ui --out $(OUT)

gpu-check-rehearsal: install  ## every stage of scripts/gpu-check.sh on this CPU at tiny sizes, into $(OUT)/gpu-check-rehearsal (about 8 minutes)
	bash scripts/gpu-check.sh --rehearse $(OUT)/gpu-check-rehearsal

container-check:  ## build the image with podman (a Debian stand-in base where NVIDIA's can't be pulled) and run it: no GPU, CPU matrix, stop/resume, MLflow login
	bash scripts/container-check.sh

lock:  ## resolve pyproject.toml's ranges afresh (torch pinned): constraints.txt + locks/cu130.txt
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet $(TORCH) $(TORCHVISION) -e '.[dev,ray,timm]'
	.lock-venv/bin/python -m pip freeze --exclude-editable | $(PYTHON) scripts/split_lock.py cu130 --shared
	rm -rf .lock-venv

lock-line:  ## freeze another CUDA line's torch build into locks/$(LINE).txt: make lock-line LINE=cu126
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet -c constraints.txt \
		--index-url https://download.pytorch.org/whl/$(LINE) --extra-index-url https://pypi.org/simple \
		$(TORCH)+$(LINE) $(TORCHVISION)+$(LINE)
	.lock-venv/bin/python -m pip freeze | $(PYTHON) scripts/split_lock.py $(LINE)
	rm -rf .lock-venv
