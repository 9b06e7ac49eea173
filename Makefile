# The two commands a person needs (see README): `make run` and `make test`.
# Both build the virtual environment first, from the locked versions.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The corpus of real tool outputs the parser tests read in place.
FLEETFIX_TEST_SAMPLES ?= $(abspath ../shared/fixtures)
export FLEETFIX_TEST_SAMPLES

.PHONY: run test lock clean

$(BIN)/fleetfix: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $@

run: $(BIN)/fleetfix
	$(BIN)/fleetfix up --simulate 50

test: $(BIN)/fleetfix
	$(BIN)/pytest

# Re-resolve the dependencies within pyproject's ranges and record what was installed.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet -e ".[dev]"
	.lock-venv/bin/python -m pip install --quiet --upgrade setuptools  # sushy's pbr needs it at run time: pinned too
	.lock-venv/bin/python -m pip freeze --all --exclude-editable | grep -v -e '^-e ' -e '^pip==' > constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
