# Two entry points (see README): `make demo` runs the bundled simulation,
# `make test` runs lint, type checks and the test suite. Both create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck bench clean

$(BIN)/shoal: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/shoal

demo: $(BIN)/shoal
	$(BIN)/shoal simulate

lint: $(BIN)/shoal
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports --no-cache

typecheck: $(BIN)/shoal
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest

bench: $(BIN)/shoal
	$(BIN)/python bench/scheduling_basic.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
