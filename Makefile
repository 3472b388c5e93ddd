# The README's two commands: `make demo` and `make test`. Both set up .venv on first use.
# `make docs` writes the API reference (pdoc, from the docstrings) to docs/api/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Pages of the API reference: the package and its public subpackages (pdoc follows them).
API_MODULES := tfblocks
PDOC_FLAGS := --docformat google

.PHONY: install demo test lint format docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python setup.py
	$(BIN)/python -m pip install --quiet -e ".[test,examples,docs]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/translate.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The suite runs in TEST_WORKERS processes (pytest-xdist), one test file per process at a
# time (module fixtures are built once): most of a test's time is single-threaded tracing and
# XLA compilation, so 2 processes use both cores of the 2-core CI machine. Files marked
# `heavy` go first (tests/conftest.py). `--cpu-times 20` ends the report with the files and
# tests that used the most CPU time (tests/cpu_times.py).
TEST_WORKERS ?= 2

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --cpu-times 20

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# docs/api/ holds only generated pages (git-ignored); it is rebuilt from scratch so that
# pages of removed modules do not linger.
docs: $(STAMP)
	rm -rf docs/api
	KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=3 PDOC_ALLOW_EXEC=1 \
		$(BIN)/pdoc $(PDOC_FLAGS) --output-directory docs/api $(API_MODULES)
	@echo "API reference written to docs/api/index.html"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache docs/api
