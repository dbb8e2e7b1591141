# The two commands: `make demo` and `make test`. Both set up .venv idempotently first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test demo clean

setup: $(STAMP)

# Re-install only when the pins or the package metadata change.
$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

test: setup
	$(BIN)/python -m pytest -q

demo: setup
	$(BIN)/tokmaint bench arithmetic

clean:
	rm -rf $(VENV) build *.egg-info
