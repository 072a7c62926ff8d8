# graphserve — the commands in the README. Every target installs what it needs first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)

MODEL      ?= mlp
SOURCE     ?= examples:$(MODEL)
BASE       ?= models
DURATION   ?= 20s
USERS      ?= 1
PROTOCOL   ?= grpc

.PHONY: install demo export serve serve-eager bench test lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP) ## create .venv and install graphserve with its dev tools

demo: $(STAMP) ## export the MLP, serve it graph and eager, compare them with locust
	$(BIN)/graphserve demo --source $(SOURCE) --name $(MODEL) --base-path $(BASE) \
		--duration $(DURATION) --users $(USERS) --protocol $(PROTOCOL) --out reports/demo

export: $(STAMP) ## export SOURCE as BASE/MODEL/<next version>
	$(BIN)/graphserve export $(SOURCE) --name $(MODEL) --base-path $(BASE)

serve: $(STAMP) ## serve BASE/MODEL with the embedded graph server (Ctrl-C stops)
	$(BIN)/graphserve serve graph --model-base-path $(BASE)/$(MODEL) --model-name $(MODEL)

serve-eager: $(STAMP) ## serve SOURCE with the eager server (Ctrl-C stops)
	$(BIN)/graphserve serve eager $(SOURCE) --model-name $(MODEL)

bench: $(STAMP) ## the benchmark suite (under 10 min): goals with pass/miss, bench/results.{json,md}
	$(BIN)/python -m bench --out bench

test: $(STAMP) ## run the test suite
	$(BIN)/python -m pytest

lint: $(STAMP) ## what CI checks besides the tests
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) reports build *.egg-info
