# muster developer targets. `make run` and `make test` are the README's two commands.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint fmt bench golden proto clean fuzz

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

golden: setup
	$(BIN)/python tests/golden/regenerate.py

# The input fuzz suite at length (the normal suite runs 60 examples per property).
fuzz: setup
	MUSTER_FUZZ_EXAMPLES=5000 $(BIN)/pytest tests/fuzz

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
