.DEFAULT_GOAL := all
VENV ?= .venv
PY := $(VENV)/bin/python

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

.PHONY: install
install: $(PY)
	$(PY) -m pip install -q -e '.[test,bench,dev]'

.PHONY: build-dev
build-dev: $(PY)
	$(PY) -m pip install -q maturin
	$(VENV)/bin/maturin develop --release

.PHONY: format
format:
	$(VENV)/bin/ruff format python tests benches examples
	$(VENV)/bin/ruff check --fix python tests benches examples
	cargo fmt

.PHONY: lint
lint:
	$(VENV)/bin/ruff format --check python tests benches examples
	$(VENV)/bin/ruff check python tests benches examples
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

.PHONY: typecheck
typecheck:
	$(VENV)/bin/mypy --strict python/tripwire
	$(PY) -m mypy.stubtest tripwire._core --allowlist .mypy-stubtest-allowlist

.PHONY: test
test:
	cargo test --lib
	$(PY) -m pytest

.PHONY: bench
bench:
	$(PY) -m pytest benches -q -p no:randomly
	$(PY) benches/memory.py

.PHONY: all
all: format lint typecheck test
