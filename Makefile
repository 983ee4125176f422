# The two set-up commands of README.md: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-core lint bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The demo writes TensorBoard event files (and its closing line opens TensorBoard), shows a
# live bar, and the README's plot commands draw PNGs: those three extras.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[tensorboard,progress,plot]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed-demo

demo: $(VENV)/.installed-demo
	$(BIN)/globalstep demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff format --check src tests bench conftest.py
	$(BIN)/ruff check src tests bench conftest.py
	$(BIN)/mypy --strict src

# Two workers (pytest-xdist) on CI's two cores: the suite is mostly single-threaded Python
# and subprocesses, and takes about half the time; worksteal evens out the slow tests.
test: lint
	$(BIN)/python -m pytest -n 2 --dist worksteal

# The core suite: the same pytest run in a venv of its own per Python with the package and
# the test tools alone (the test-core extra, no framework), so that each Python that
# requires-python promises runs it, and each test of a missing extra skips (conftest.py).
# `make test-core PYTHON=python3.13`; CORE_VENV=DIR to keep the venv elsewhere.
PYTHON_VERSION = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CORE_VENV ?= .venv-core$(PYTHON_VERSION)

$(CORE_VENV)/.installed-core: pyproject.toml
	$(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install -q --upgrade pip
	$(CORE_VENV)/bin/python -m pip install -q -e '.[test-core]'
	touch $@

test-core: $(CORE_VENV)/.installed-core
	$(CORE_VENV)/bin/python -m pytest -n 2 --dist worksteal

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/bench_import.py
	$(BIN)/python bench/bench_schedules.py
	$(BIN)/python bench/bench_summary.py
	$(BIN)/python bench/bench_checkpoint.py
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python bench/bench_run.py
