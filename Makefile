# fedrca — every target works on a fresh machine as the only command.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.fedrca-installed

.PHONY: demo test exhaustive bench docs-figures install lint typecheck system-deps kafka-jars k8s clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Reinstall only when the dependency list changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,sim]'
	touch $@

install: $(STAMP)

## make demo: install, then run the main job on the embedded default (no broker needed)
demo: $(STAMP)
	$(BIN)/fedrca demo

## make test: install what tests need (Python deps, Java/Maven/promtool) and run everything
test: $(STAMP) system-deps kafka-jars
	$(BIN)/ruff check src tests $(wildcard bench)
	$(BIN)/ruff format --check src tests $(wildcard bench)
	$(BIN)/lint-imports
	@# mypy (a minute on a fresh clone) beside the suite, whose three processes leave a fifth of two cores idle
	@# on waits; its report follows the suite's, and either failing fails make test
	@# one BLAS thread per process (the suite's and every process a test starts): three processes of two
	@# spinning OpenBLAS threads each on two cores spent five times the CPU of one thread (tests/conftest.py)
	$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & typing=$$!; \
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/pytest -m "not exhaustive" -n 3 --dist loadfile --durations=30; tests=$$?; \
	wait $$typing; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.log; \
	test $$tests -eq 0 && test $$typed -eq 0

## make exhaustive: the many-example runs of the property and fuzz tests (tens of minutes)
exhaustive: $(STAMP) system-deps kafka-jars
	$(BIN)/pytest -m exhaustive -s

## make bench: benchmarks against named peers, measured in the same run
bench: $(STAMP) kafka-jars
	$(BIN)/python bench/run.py --repeat 3

## make docs-figures: rerun the command behind every figure the docs quote and rewrite it (tools/docs_figures.py;
## the benchmarks included: run it alone on an otherwise idle machine, load < 2)
docs-figures: $(STAMP) kafka-jars
	$(BIN)/python tools/docs_figures.py

system-deps:
	tools/ensure-system-deps.sh

## make kafka-jars: Apache Kafka jars from Maven Central into tools/kafka/lib/ (no-op when present)
kafka-jars: system-deps
	$(PYTHON) tools/kafka/broker.py fetch

## make k8s: regenerate k8s/base/ from config/ (tools/sync-k8s.py; tests/deploy checks it is up to date)
k8s: $(STAMP)
	$(BIN)/python tools/sync-k8s.py

lint: $(STAMP)
	$(BIN)/ruff check src tests $(wildcard bench)
	$(BIN)/ruff format --check src tests $(wildcard bench)
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	-$(PYTHON) tools/kafka/broker.py stop
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist src/*.egg-info out reports params .kafka .fedrca-faust
