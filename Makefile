# Two entry points: `make repro` (the main job) and `make test` (the default test tier;
# `make test-all` adds the slow tier, as CI does).
# Both create .venv with Python 3.11 + pip on first use. `make bench`: the speed benchmark
# (docs/benchmarks.md; about an hour on 2 cores, needs ../shared/data/bbc). `make server`,
# `make server-stop`, `make server-status`: the team's tracking server (README, Team setup).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: repro test test-all install bench server server-stop server-status

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: the CPU build on this disk; an unpinned torch pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# preflight: a FIFO in the corpus folder would make `dvc repro` hang (README, Known limits);
# leftover: a checkpoint nothing will resume once DVC restored the training from its run-cache
# (README, Failure and recovery); report_picture: the README's docs/report.png, drawn from the
# report by headless Chromium where it is installed (left as it is where not)
repro: $(STAMP)
	$(BIN)/python -m textclf.preflight
	PATH="$(CURDIR)/$(BIN):$$PATH" dvc repro
	$(BIN)/python -m textclf.leftover
	$(BIN)/python scripts/report_picture.py

# Two xdist workers, one per core (each test file runs on one worker, so a module's fixtures
# are built once; tests/conftest.py builds the shared session fixtures once for both), a
# random order (pytest-randomly prints its seed; PYTEST_ARGS=--randomly-seed=N replays it),
# and the 15 slowest tests listed, so that a slow newcomer shows up the day it lands.
PYTEST := $(BIN)/python -m pytest -n 2 --dist loadfile --durations=15

test: $(STAMP)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

bench: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python benchmarks/speed/throughput.py --levers $(BENCH_ARGS)

server: $(STAMP)
	bash scripts/server.sh start

server-stop:
	bash scripts/server.sh stop

server-status:
	bash scripts/server.sh status
