# Set-up and checks. `make reproduce`, `make test` and `make docs` each set up what they need in .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CHROMIUM ?= /usr/bin/chromium

.PHONY: reproduce test lint typecheck unit bench docs docs-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-core: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[solvers]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev,runtime,solvers]'
	touch $@ $(VENV)/.installed-core

# Sphinx, myst-nb and the theme, beside everything autodoc imports (torch and the solvers).
$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[docs,dev,runtime,solvers]'
	touch $@ $(VENV)/.installed-dev $(VENV)/.installed-core

reproduce: $(VENV)/.installed-core
	$(BIN)/llmsched reproduce gsm8k

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks docs
	$(BIN)/ruff format --check src tests benchmarks docs

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

unit: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -n 2 -q

test: lint typecheck unit

bench: $(VENV)/.installed-core
	$(BIN)/python benchmarks/simulator_speed.py
	$(BIN)/python benchmarks/pcmax_bench.py

# The HTML documentation in docs/_build/html; any Sphinx warning (an unresolved reference
# included: -n) fails the build.
docs: $(VENV)/.installed-docs
	$(BIN)/sphinx-build -n -W --keep-going -q -b html -d docs/_build/doctrees docs docs/_build/html

# Every internal link and anchor of the built documentation, as headless Chromium renders it.
docs-check: $(VENV)/.installed-docs
	$(BIN)/python docs/check_links.py docs/_build/html --chromium $(CHROMIUM)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis src/*.egg-info docs/_build docs/api
