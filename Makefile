# muster developer targets. `make run` and `make test` are the README's two commands.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint fmt bench chaos golden proto clean

CONTRACTS := services/muster/contracts/v1/events_pb2.py
PROTOS := $(wildcard proto/muster/v1/*.proto)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Generated code is not committed: it is made from proto/ on every machine.
$(CONTRACTS): $(PROTOS) proto/generate.py $(STAMP)
	$(BIN)/python proto/generate.py

setup: $(STAMP) $(CONTRACTS)

proto: $(STAMP)
	$(BIN)/python proto/generate.py

# The embedded default: for now the admission core on the virtual clock over the built-in demo.
run: setup
	$(BIN)/muster run

test: setup
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

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

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
