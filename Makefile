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

.PHONY: install docs test-packages docker-engine images demo export serve serve-eager bench bench-peers bench-families bench-many bench-tls bench-traffic figures soak fuzz test test-peers lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,docs,zoo,bench]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP) ## create .venv and install graphserve with its dev tools

# What the tests need from Debian: Chromium for the report's browser test
# (tests/test_report_browser.py), g++ for the custom op the op-library tests compile
# (tests/test_op_libraries.py). As root (CI) they are installed here; anyone else is told which
# packages to install.
TEST_PACKAGES = chromium:chromium g++:g++
test-packages: ## Debian's chromium and g++, for the browser test and the custom op test
	@missing=""; for pair in $(TEST_PACKAGES); do \
		command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair#*:}"; \
	done; \
	[ -z "$$missing" ] || { \
		if [ "$$(id -u)" -eq 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		else \
			echo "make test needs Debian's packages$$missing: sudo apt-get install$$missing" >&2; \
			exit 1; \
		fi; }

# The container tests (tests/test_containers.py) need a Docker engine: as root (CI) Debian's
# docker.io, docker-compose and debootstrap are installed and dockerd started here; anyone else
# is told which packages, and the tests marked docker skip (GRAPHSERVE_REQUIRE_DOCKER=1: fail).
docker-engine: ## Debian's docker.io, docker-compose, debootstrap, and a running dockerd
	docker/engine --require

# No registry needed: the base from Debian's packages (once per machine), the wheels fetched
# here with pip, then graphserve-graph:local, graphserve-eager:local and the TF Serving stand-in.
images: $(STAMP) docker-engine ## the container images, built here (docker/build-images)
	PYTHON=$(BIN)/python docker/build-images

demo: $(STAMP) ## export the MLP, serve it graph and eager, compare them with locust
	$(BIN)/graphserve demo --source $(SOURCE) --name $(MODEL) --base-path $(BASE) \
		--duration $(DURATION) --users $(USERS) --protocol $(PROTOCOL) --out reports/demo

export: $(STAMP) ## export SOURCE as BASE/MODEL/<next version>
	$(BIN)/graphserve export $(SOURCE) --name $(MODEL) --base-path $(BASE)

serve: $(STAMP) ## serve BASE/MODEL with the embedded graph server (Ctrl-C stops)
	$(BIN)/graphserve serve graph --model-base-path $(BASE)/$(MODEL) --model-name $(MODEL)

serve-eager: $(STAMP) ## serve SOURCE with the eager server (Ctrl-C stops)
	$(BIN)/graphserve serve eager $(SOURCE) --model-name $(MODEL)

bench: $(STAMP) ## the benchmark suite, the server's own cost and real traffic (minutes): goals with pass/miss, tools/bench/results/{results,frontend,traffic}.{json,md}
	$(BIN)/python -m tools.bench --out tools/bench/results
	$(BIN)/python -m tools.bench frontend --out tools/bench/results
	$(BIN)/python -m tools.bench traffic --out tools/bench/results

# Each peer (KServe, BentoML, LitServe, PyTriton, FastAPI) in its own venv under tools/bench/.work,
# installed there on first use (about 6 min and 12 GB for all five), kept for the next run.
bench-peers: $(STAMP) ## graphserve against the servers users pick instead: tools/bench/results/peers.{json,md,png}
	$(BIN)/python -m tools.bench peers --out tools/bench/results

# The five model families of docs_src/byom (keras_hub and transformers BERTs, EfficientNetB0, a
# Keras text classifier, a tf.Module with a vocabulary file), tiny and built in code: about 3 min.
bench-families: $(STAMP) ## export, serve and load the models users bring: tools/bench/results/families.{json,md}
	$(BIN)/python -m tools.bench families --out tools/bench/results

# A thousand copies of the mlp on one server loading on demand (first answer, Zipf traffic with
# 200 resident, isolation, memory back with four allocators): about 15 min.
bench-many: $(STAMP) ## many models loaded on demand: tools/bench/results/many.{json,md,png}
	$(BIN)/python -m tools.bench many --out tools/bench/results

# A tiny keras_hub BERT (1-16 rows, sequence lengths 8-128) and MobileNetV2 (1-32 rows), served
# graph and eager, replayed one request at a time from traffic files: latency by request shape.
# About 5 min.
bench-traffic: $(STAMP) ## graph against eager by request shape (issue 50's T6): tools/bench/results/traffic-shapes.{json,md}
	$(BIN)/python -m tools.bench shapes --out tools/bench/results

# Three graph servers of the mlp, plaintext, TLS and mutual TLS (certificates made by trustme),
# over gRPC and REST: keep-alive and new-connection p50, 16 clients' req/s and server CPU per
# request, each against plaintext in the same run. About 3 min.
bench-tls: $(STAMP) ## what TLS costs against plaintext: tools/bench/results/tls.{json,md}
	$(BIN)/python -m tools.bench tls --out tools/bench/results

# Every published figure from the current code: the suite, the generator, the families, the
# soak (SOAK=1h), the many-models run (15 min), TLS against plaintext (3 min), the peers (their venvs installed on first use),
# the containers (a Docker engine) and the manual's sample report, one after the other. Hours,
# not minutes.
figures: SOAK ?= 15m
figures: $(STAMP) ## regenerate every published figure: tools/bench/results/* and docs/loadtest/*
	$(BIN)/python -m tools.bench figures --soak-duration $(SOAK)

# An hour by default; `make soak DURATION=10m` for a short one (a command-line DURATION beats
# this target's own default, which beats the demo's 20 s).
soak: DURATION = 1h
soak: $(STAMP) ## graph server under load, a version swap a minute: RSS growth, tools/bench/results/soak.{md,json,png}
	$(BIN)/python -m tools.bench soak --duration $(DURATION) --out tools/bench/results

# Raw HTTP/1.x requests at a real `serve graph` (tools/fuzz/http_raw.py: CASES of them, 16 connections
# at once, about a minute for 5000), then gRPC and REST clients that give up on their requests at
# random moments against a batching `serve graph` (tools/fuzz/cancel.py: CANCEL_FOR of load, about 30 s
# in all), then the REST JSON decoder under atheris (tools/fuzz/rest_json.py) for a few
# thousand runs where atheris installs (x86_64 Linux); a finding fails the target.
fuzz: CASES ?= 5000
fuzz: CANCEL_FOR ?= 20s
fuzz: $(STAMP) ## fuzz the REST server with raw requests, cancel requests under load: tools/bench/results/{fuzz-http,cancel}.json
	$(BIN)/python -m tools.fuzz.http_raw --cases $(CASES) --seed 0 --out tools/bench/results/fuzz-http.json
	$(BIN)/python -m tools.fuzz.cancel --duration $(CANCEL_FOR) --seed 0 --out tools/bench/results/cancel.json
	@if $(BIN)/python -c 'import atheris' 2>/dev/null; then \
		$(BIN)/python -m tools.fuzz.rest_json -atheris_runs=5000 -seed=1 -max_len=2048 \
			-artifact_prefix=$${TMPDIR:-/tmp}/graphserve-atheris-; \
	else echo "atheris is not installed (x86_64 Linux only): tools/fuzz/rest_json.py skipped"; fi

# A worker a core, at most 4 (each holds TensorFlow and its servers: about 1 GB), a test file a
# worker (its module fixtures are built once); TEST_WORKERS=0 runs the suite in this process.
# Then the tests marked `alone`, with nothing beside them (docs/development.md says why).
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))

test: $(STAMP) test-packages ## run the test suite
	@docker/engine
	status=0; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone" || status=$$?; \
	$(BIN)/python -m pytest -m alone || status=$$?; \
	exit $$status

test-peers: $(STAMP) ## each peer's adapter against a real install of it (not in CI: installs all five)
	GRAPHSERVE_PEERS=1 $(BIN)/python -m pytest -m peers tests/test_bench_peers.py

lint: $(STAMP) ## what CI checks besides the tests, the manual's strict build included
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# The manual, from docs/ and mkdocs.yml, into build/site (open build/site/index.html);
# `.venv/bin/mkdocs serve` serves it with live reload while you write.
docs: $(STAMP) ## the documentation site, built into build/site
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

clean:
	rm -rf $(VENV) reports build *.egg-info
	find docker/wheels -mindepth 1 ! -name .gitignore -delete
