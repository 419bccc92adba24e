# `make demo` and `make test` each create/refresh the local virtual environment (.venv), then run.
# torch is pinned to 2.13.0 here so that pip takes the CPU build already on disk; override TORCH
# (e.g. `make test TORCH=torch`) where any torch will do.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export TOKENIZERS_PARALLELISM := false
export RAY_USAGE_STATS_ENABLED := 0
# Byte-code caches on (a machine may turn them off): the suite starts hundreds of Python processes
# (CLI runs, Ray workers, MLflow servers), each of which would compile the harness again, and
# pytest caches its rewritten test modules the same way.
unexport PYTHONDONTWRITEBYTECODE
# pytest-xdist workers for `make test`: one per core of the 2-core machines CI runs on; a file's
# tests share a worker (`--dist loadfile`), so a module's study runs once; the files take the order
# tests/conftest.py gives them (longest first: --no-loadscope-reorder), so both workers end together.
TEST_WORKERS ?= 2

.PHONY: venv demo demo-collections test test-fast test-all lint docs bench bench-gpu clean

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

venv: $(STAMP)

demo: venv
	$(VENV)/bin/harness demo

# The demo over two collections (chitchat and the shipped Cranfield): one table with both.
demo-collections: venv
	$(VENV)/bin/harness demo --collections

test: venv
	@{ command -v chromium && command -v pdflatex && command -v pdftotext; } >/dev/null || [ "$$(id -u)" != 0 ] || { apt-get update -qq && for p in chromium "texlive-latex-recommended poppler-utils"; do DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$p >/dev/null || echo "$$p not installed: the browser or PDF tests will skip"; done; }
	$(PY) -m pytest -q -m "not heavy" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

test-fast: venv
	$(PY) -m pytest -q -m "not slow and not heavy" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Everything, the heavy tests too (kill-and-resume and cluster scenarios, the GPU benchmark's CPU
# full rehearsal: docs/testing.md).
test-all: venv
	$(PY) -m pytest -q -m "slow or not slow" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

lint: venv
	$(VENV)/bin/ruff check harness tests benchmarks

# The documentation site (mkdocs.yml, docs/) into site/; tests/test_docs.py builds it strictly as well.
docs: venv
	$(PY) -m mkdocs build --strict

bench: venv
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/trainer.py
	$(PY) benchmarks/cascade.py

# On a CUDA machine: the prepared GPU run (benchmarks/device_run.sh; docs/benchmarks.md, "The device
# run"): trainer throughput and MFU (harness, fused seeds, HF Trainer, sentence-transformers), then
# length 512, trials sharing the GPU and the cascade, within a time budget; results in $(OUT) (default
# ./device-out). Installs nothing: it uses the venv's python if there is one, else $(PYTHON).
bench-gpu:
	PYTHON=$(if $(wildcard $(PY)),$(PY),$(PYTHON)) benchmarks/device_run.sh

clean:
	rm -rf $(VENV) .pytest_cache site
