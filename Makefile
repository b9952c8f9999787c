# muster developer targets. `make run` and `make test` are the README's two commands.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint fmt bench chaos golden proto clean lock fuzz

CONTRACTS := services/muster/contracts/v1/events_pb2.py
PROTOS := $(wildcard proto/muster/v1/*.proto)

# Every dependency at the version and hashes of the lock (requirements/README.md), then muster
# itself without resolving anything more.
LOCK := requirements/dev.txt
$(STAMP): pyproject.toml $(LOCK)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Generated code is not committed: it is made from proto/ on every machine.
$(CONTRACTS): $(PROTOS) proto/generate.py $(STAMP)
	$(BIN)/python proto/generate.py

setup: $(STAMP) $(CONTRACTS)

proto: $(STAMP)
	$(BIN)/python proto/generate.py

# The demo: NATS and every service as processes, the built-in scenario replayed at 10x (README).
run: setup
	$(BIN)/muster run

test: setup
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	for conftest in $$(find tests -mindepth 2 -name conftest.py | sort); do $(BIN)/mypy $$conftest || exit 1; done

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: setup
	$(BIN)/muster bench

# Issue 20's long run: every service killed at random and nats-server restarted, 2 000 workloads
# over 2 admission shards, against the same run without faults (README, "Restart anything").
chaos: setup
	$(BIN)/muster bench chaos --workloads 2000 --shards 2

golden: setup
	$(BIN)/python tests/golden/regenerate.py

# The input fuzz suite at length (the normal suite runs 60 examples per property).
fuzz: setup
	MUSTER_FUZZ_EXAMPLES=5000 $(BIN)/pytest tests/fuzz

# Re-pin requirements/*.txt from pyproject.toml's ranges (Python 3.11, Linux x86_64).
UV_VERSION := 0.13.8
LOCK_FLAGS := --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock"
lock:
	rm -rf .venv-lock && $(PY) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet uv==$(UV_VERSION)
	.venv-lock/bin/uv pip compile $(LOCK_FLAGS) --extra otlp pyproject.toml -o requirements/service.txt
	.venv-lock/bin/uv pip compile $(LOCK_FLAGS) --extra dev --extra bench --extra otlp pyproject.toml \
		requirements/build.in -c requirements/service.txt -o requirements/dev.txt
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
