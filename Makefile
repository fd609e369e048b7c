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

.PHONY: help setup course lab test test-unit test-notebooks test-labs labs check-labs grade strip lint clean

help:
	@echo "make course [QUICK=1]   run every lecture notebook, render HTML, print measured figures"
	@echo "make test               the whole test suite (what CI runs)"
	@echo "make lab                open JupyterLab on the course"
	@echo "make grade LAB=labs/lab00_measure_your_machine.ipynb   score a lab"
	@echo "make labs / check-labs  regenerate labs/ from solutions/ / fail if stale"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@idx="$(TORCH_INDEX)"; \
	if [ -n "$$idx" ] && ! $(BIN)/python -c "import urllib.request; urllib.request.urlopen('$$idx/', timeout=10)" 2>/dev/null; then \
		echo "setup: $$idx is not reachable; torch comes from pip's configured indexes"; idx=""; fi; \
	echo "setup: installing torch==$(TORCH_VERSION) first$${idx:+ from $$idx}"; \
	$(BIN)/python -m pip install --quiet "torch==$(TORCH_VERSION)" $${idx:+--extra-index-url $$idx}
	$(BIN)/python -m pip install --quiet -e ".[course,dev]"
	$(BIN)/python -c "import torch, perfkit; print('torch', torch.__version__, '| perfkit', perfkit.__version__)"
	@touch $(STAMP)

course: $(STAMP)
	$(BIN)/python -m tools.run_course $(QUICK_FLAG)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=.

labs: $(STAMP)
	$(BIN)/python -m tools.make_labs

check-labs: $(STAMP)
	$(BIN)/python -m tools.make_labs --check

grade: $(STAMP)
	@test -n "$(LAB)" || (echo "usage: make grade LAB=labs/lab00_measure_your_machine.ipynb" >&2; exit 2)
	$(BIN)/python -m tools.grade "$(LAB)" --json build/grades/$(notdir $(basename $(LAB))).json

# Unit, distributed, lab and notebook (papermill, QUICK) tests, then nbval on every
# notebook: kept outputs of `# NBVAL_CHECK_OUTPUT` cells must match a fresh run.
test: $(STAMP) check-labs lint
	$(BIN)/python -m pytest -q -ra --durations=15 tests
	PERFKIT_QUICK=1 $(BIN)/python -m pytest -q -p no:randomly --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=120 notebooks solutions

lint: $(STAMP)
	$(BIN)/ruff check .

strip: $(STAMP)
	$(BIN)/python -m tools.strip_notebooks

clean:
	rm -rf build
