# The two set-up commands of README.md: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench

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
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy --strict src

# Two workers (pytest-xdist) on CI's two cores: the suite is mostly single-threaded Python
# and subprocesses, and takes about half the time; worksteal evens out the slow tests.
test: lint
	$(BIN)/python -m pytest -n 2 --dist worksteal

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/bench_import.py
	$(BIN)/python bench/bench_schedules.py
	$(BIN)/python bench/bench_summary.py
	$(BIN)/python bench/bench_checkpoint.py
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python bench/bench_run.py
