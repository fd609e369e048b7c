# The course's commands. Every target that needs the environment depends on .venv's stamp,
# so `make course` and `make test` each work as the first command on a fresh machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
# CPU build unless a GPU is visible: pip would otherwise fetch a multi-GB CUDA build.
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
ifeq ($(HAS_GPU),1)
TORCH_INDEX ?=
else
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
endif
QUICK ?=
LAB ?=
QUICK_FLAG := $(if $(filter 1 true yes,$(QUICK)),--quick,)
CHROMIUM ?= /usr/bin/chromium
PROMETHEUS ?= /usr/bin/prometheus
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
HAVE_PAGES := ls build/notebooks/[0-9][0-9]_*.ipynb >/dev/null 2>&1
# `make test` drives notebook 00's widget in the browser (the 3-minute budget);
# `make browser-test` drives one widget of every notebook.
TEST_BROWSER_NOTEBOOKS ?= 00

.PHONY: help setup course lab test nbval notebooks labs check-labs grade strip lint clean browser-deps browser-test prometheus-deps prometheus-test site limits gpu-run

help:
	@echo "make course [QUICK=1]   run every lecture notebook, render HTML, print measured figures"
	@echo "make test               the whole test suite (what CI runs)"
	@echo "make lab                open JupyterLab on the course"
	@echo "make grade LAB=labs/lab00_measure_your_machine.ipynb   score a lab"
	@echo "make notebooks          write each .ipynb from its jupytext source (notebooks/src, solutions/src)"
	@echo "make labs / check-labs  regenerate labs/ from solutions/ / fail if stale"
	@echo "make limits             this machine's ceilings (python -m perfkit limits)"
	@echo "make gpu-run [WHEELS=d] on a CUDA machine: GPU tests, notebooks, benchmarks in 8 min (build/gpu_run/); else the plan"
	@echo "make site               the executed notebooks as a book (build/site/; search needs http.server)"
	@echo "make browser-test       JupyterLab in a real Chromium: every notebook's widget, and the site"
	@echo "make prometheus-test    the generated alert rules in a real Prometheus server and promtool"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@idx="$(TORCH_INDEX)"; \
	if [ -n "$$idx" ] && ! $(BIN)/python -c "import urllib.request; urllib.request.urlopen('$$idx/', timeout=10)" 2>/dev/null; then \
		echo "setup: $$idx is not reachable; torch comes from pip's configured indexes"; idx=""; fi; \
	echo "setup: installing torch==$(TORCH_VERSION) first$${idx:+ from $$idx}"; \
	$(BIN)/python -m pip install --quiet "torch==$(TORCH_VERSION)" $${idx:+--extra-index-url $$idx}
	$(BIN)/python -m pip install --quiet -e ".[course,dev]"
	@# llm-analysis (plan.llm_analysis) without its deps: they pin transformers<5, used only for hub lookups
	$(BIN)/python -m pip install --quiet "fire==0.7.1" && $(BIN)/python -m pip install --quiet --no-deps "llm-analysis==0.2.2"
	$(BIN)/python -c "import torch, perfkit; print('torch', torch.__version__, '| perfkit', perfkit.__version__)"
	@touch $(STAMP)

course: $(STAMP)
	$(BIN)/python -m tools.run_course $(QUICK_FLAG)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=.

notebooks: $(STAMP)
	$(BIN)/python -m tools.notebooks sync

labs: $(STAMP) notebooks
	$(BIN)/python -m tools.make_labs

check-labs: $(STAMP)
	$(BIN)/python -m tools.make_labs --check

grade: $(STAMP)
	@test -n "$(LAB)" || (echo "usage: make grade LAB=labs/lab00_measure_your_machine.ipynb" >&2; exit 2)
	$(BIN)/python -m tools.grade "$(LAB)" --json build/grades/$(notdir $(basename $(LAB))).json

# Unit, distributed, lab and notebook tests, as two pytest processes side by side
# (tools/test_streams.py: the labs and notebooks beside the rest; reports in build/test-reports/):
# every notebook executed once with papermill in
# QUICK mode, rendered into build/notebooks/, its `# NBVAL_CHECK_OUTPUT` cells compared with
# their committed outputs as `pytest --nbval-lax` does (`make nbval` runs nbval itself, a
# second execution); then the real-browser tests. The Prometheus server tests (about 15 s)
# run in the pytest call.
test: $(STAMP) check-labs lint browser-deps prometheus-deps
	$(BIN)/python -m tools.test_streams
	$(MAKE) --no-print-directory site QUICK=1
	PERFKIT_BROWSER_NOTEBOOKS=$(TEST_BROWSER_NOTEBOOKS) $(BIN)/python -m pytest -q -ra \
		--durations=15 -m browser tests/browser

nbval: $(STAMP)
	PERFKIT_QUICK=1 $(BIN)/python -m pytest -q -p no:randomly --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=120 notebooks

# Debian's Chromium (Playwright's own browser download cannot work on a closed network);
# Playwright for Python comes with the dev extra.
browser-deps: $(STAMP)
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver; }

browser-test: browser-deps
	$(MAKE) --no-print-directory site QUICK=1
	$(BIN)/python -m pytest -q -ra --durations=15 -m browser tests/browser

# Debian's Prometheus server and promtool for tests/prometheus (the tests skip without them);
# no node exporter. The tests start their own server on a free loopback port.
prometheus-deps:
	@test -x $(PROMETHEUS) || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
		prometheus; }

prometheus-test: $(STAMP) prometheus-deps
	$(BIN)/python -m pytest -q -ra -s -m prometheus tests/prometheus

# The executed notebooks as a Jupyter Book in build/site (runs the course first when no notebook
# was executed; a notebook that fails is marked on the index, so the site is built anyway).
# Serve it with `python -m http.server --directory build/site 8000`: search needs a server.
site: $(STAMP)
	@$(HAVE_PAGES) || $(BIN)/python -m tools.run_course $(QUICK_FLAG) || \
		echo "some notebooks failed: the site marks them"
	$(BIN)/python -m tools.book

limits: $(STAMP)
	$(BIN)/python -m perfkit limits

# The course's GPU paths in one budgeted run (tools/gpu_run.py). No .venv needed: a GPU
# machine brings its own torch; WHEELS=DIR installs papermill & co. from wheels first, offline
# (`python -m tools.gpu_run --download-wheels DIR` fetches them where pip works).
WHEELS ?=
gpu-run:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) -m tools.gpu_run $(if $(WHEELS),--wheels $(WHEELS),)

lint: $(STAMP)
	$(BIN)/ruff check .

strip: $(STAMP)
	$(BIN)/python -m tools.strip_notebooks

clean:
	rm -rf build
