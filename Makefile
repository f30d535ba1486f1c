# Two entry points a person needs on a fresh machine (Python 3.11, no GPU):
#   make quickstart   set everything up, start the embedded server, run the main job
#   make test         set everything up, run the whole test suite (what CI runs)
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# torch first and pinned: an open `torch` requirement can pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: setup quickstart test lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/no-deps.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps -r requirements/no-deps.txt
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

quickstart: setup
	$(VENV)/bin/tgi-toolkit quickstart

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV)
