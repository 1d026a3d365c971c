# Two entry points: `make repro` (the main job) and `make test` (the test suite).
# Both create .venv with Python 3.11 + pip on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: repro test install

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: the CPU build on this disk; an unpinned torch pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

repro: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" dvc repro

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)
