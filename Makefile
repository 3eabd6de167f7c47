# Set-up and everyday commands. Everything installs into .venv from the pinned constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= runs
HEADER := "\# Exact versions CI and the container image install: pip install -c constraints.txt -e '.[dev]'\n\# Regenerate after changing dependencies in pyproject.toml: make lock"

.PHONY: install run test lint ui lock

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

run: install  ## the matrix that fits this machine (GPU: default.yaml, else smoke.yaml) into $(OUT)/
	$(BIN)/amp-suite run --out $(OUT)

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check amp_suite tests scripts
	$(BIN)/hadolint Dockerfile mlflow/Dockerfile

ui: install
	$(BIN)/amp-suite ui --out $(OUT)

lock:  ## resolve pyproject.toml's ranges afresh (torch pinned) and freeze them into constraints.txt
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1 -e '.[dev]'
	(printf $(HEADER)"\n"; .lock-venv/bin/python -m pip freeze --exclude-editable) > constraints.txt
	rm -rf .lock-venv
