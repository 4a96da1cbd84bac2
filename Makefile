# Every target sets itself up: a fresh Debian machine with python3 (3.11+) is enough.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck check protos bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## The main job on this machine: the demo config against the embedded kubelet.
demo: $(STAMP)
	$(BIN)/genericdp simulate configs/examples/demo.yaml --once

## The whole test suite, with lint and type checks first.
test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

## Regenerate the kubelet API stubs from the .proto files beside them.
protos: $(STAMP)
	$(BIN)/python -m genericdp.kubelet.api.generate

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache

## Speed and memory, measured: medians over repetitions, with the machine named.
bench: $(STAMP)
	$(BIN)/python -m bench.run
