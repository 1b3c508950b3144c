.DEFAULT_GOAL := all
VENV ?= .venv
PY := $(VENV)/bin/python

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

.PHONY: install
install: $(PY)
	# `test` brings the SDKs and frameworks too: the adapters are tested and type-checked against them.
	$(PY) -m pip install -q -e '.[test,bench,dev,docs]'

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
	# The pyo3-free core alone, then with the Python extension's modules.
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python -- -D warnings

.PHONY: typecheck
typecheck:
	$(VENV)/bin/mypy --strict python/tripwire
	$(PY) -m mypy.stubtest tripwire._core --allowlist .mypy-stubtest-allowlist

.PHONY: test
test:
	cargo test --lib
	$(PY) -m pytest

# The documentation site (docs/, mkdocs.yml), as CI builds it: a broken link fails.
.PHONY: docs
docs:
	$(VENV)/bin/mkdocs build --strict

.PHONY: bench
bench:
	$(PY) -m pytest benches -q -p no:randomly
	$(PY) benches/memory.py
	$(PY) benches/state.py

# Differential fuzzing, native vs reference (fuzz/README.md): each target for $(SECONDS) s,
# new inputs kept in fuzz/work/<target>/, seeds read from fuzz/corpus/<target>/.
SECONDS ?= 60
FUZZ_FLAGS ?=

.PHONY: fuzz
fuzz: $(PY)
	$(PY) -m pip install -q atheris
	mkdir -p fuzz/work/call_key_json fuzz/work/call_key
	$(PY) fuzz/fuzz_call_key_json.py fuzz/work/call_key_json fuzz/corpus/call_key_json \
		-dict=fuzz/json.dict -max_len=4096 -timeout=20 -rss_limit_mb=4096 \
		-max_total_time=$(SECONDS) -print_final_stats=1 \
		-artifact_prefix=fuzz/work/call_key_json/ $(FUZZ_FLAGS)
	$(PY) fuzz/fuzz_call_key.py fuzz/work/call_key fuzz/corpus/call_key \
		-max_len=2048 -timeout=20 -rss_limit_mb=4096 \
		-max_total_time=$(SECONDS) -print_final_stats=1 \
		-artifact_prefix=fuzz/work/call_key/ $(FUZZ_FLAGS)

# The run-state + operations fuzzer (plain Python, no atheris): CASES cases from SEED.
CASES ?= 1000
SEED ?= 0

.PHONY: fuzz-state
fuzz-state: $(PY)
	$(PY) fuzz/fuzz_guard_state.py --cases $(CASES) --seed $(SEED)

.PHONY: all
all: format lint typecheck test
