# mfulab — `make all` regenerates every study, `make test` runs the tests.
# Both create the environment first: a venv in .venv with the dependencies of pyproject.toml
# and a Jupyter kernel named "mfulab".

PYTHON   ?= python3
VENV     ?= .venv
PROFILE  ?= auto
ARGS     ?=
FROM     ?=
FORCE    ?=
STUDY    ?=
N        ?= 3
PORT     ?= 8888
LAB_ARGS ?=
# torch: on machines without an NVIDIA driver the CPU build is installed first (pyproject
# asks for a range it satisfies). Elsewhere than the reference box, a CPU-only Linux machine
# gets the small CPU wheel with TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu".
TORCH_CPU   ?= torch==2.13.0
TORCH_INDEX ?=
HAS_NVIDIA  := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
# Offline clusters: `make wheelhouse` (on a machine with a network, same Python and platform)
# downloads every wheel into WHEELHOUSE; `make env WHEELS=<that folder>` installs from it alone.
# TORCH_WHEEL: the torch to put there (the CUDA build from PyPI on NVIDIA machines by default).
WHEELHOUSE  ?= wheelhouse
# TEST_WORKERS: make test runs the test files on this many pytest-xdist workers (one file each).
TEST_WORKERS ?= 2
WHEELS      ?=
TORCH_WHEEL ?= $(if $(HAS_NVIDIA),torch==2.13.0,$(TORCH_CPU))
PIP_FROM    := $(if $(WHEELS),--no-index --find-links $(abspath $(WHEELS)),)

PY       := $(VENV)/bin/python
# pip byte-compiles what it installs one file at a time (torch: 26 of its 39 s on the 2-core
# box). The .pyc files are needed: where PYTHONDONTWRITEBYTECODE is set, as on that box, none is
# ever written later and every process compiles what it imports again (make test: 955 → 1150 s).
# So pip installs with --no-compile and compileall writes the same .pyc files on every core
# (a file in newer Python syntax than this Python's is skipped, as pip skips it: torch ships one;
# compileall then exits 1, which is not an install failure).
PIP_INSTALL := $(PY) -m pip install --quiet --no-compile
COMPILE_VENV = $(PY) -m compileall -q -j 0 $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null || true
STAMP    := $(VENV)/.mfulab-installed
# The tests, the linter and the course site need more than a course run: their extras go into
# the same venv on first use (make test-env), so that make all installs only what it runs.
TEST_STAMP := $(VENV)/.mfulab-test-installed
# JupyterLab is for reading and editing (make lab), not for a course run: it goes in on first use.
LAB_STAMP := $(VENV)/.mfulab-lab-installed
STUDIES  := $(filter-out compare,$(sort $(patsubst studies/%/,%,$(wildcard studies/*/))))
SITE_MACHINE ?=

.PHONY: help env test-env wheelhouse check-gpu check-node all test lint format lab calibrate stability list readme html compare clean distclean $(STUDIES)
.NOTPARALLEL:

help:
	@echo "make all                 run every study whose notebook, profile, library or torch changed"
	@echo "                         (PROFILE=auto: gpu where CUDA is available, else cpu; FORCE=1 re-runs all)"
	@echo "make test                lint (ruff) and run the tests"
	@echo "make lab                 JupyterLab with the mfulab kernel; notebooks/*.py open as notebooks"
	@echo "make calibrate           this machine's ceilings, bandwidth and α–β (REFRESH=1 re-measures)"
	@echo "make stability STUDY=id  re-run a study's measurement N=3 times in fresh processes: verdict flips"
	@echo "                         and drift into results/<machine>/<study>/stability.json (STUDY=calibration too)"
	@echo "                         KEEP=DIR keeps the last run: make <study> FROM=DIR renders it (no 4th run)"
	@echo "make list                studies, profiles, and which ones make all would re-run"
	@echo "make readme              rewrite README.md's course table from the study registry"
	@echo "make <study>             one study, e.g. make mfu PROFILE=gpu ARGS=\"-p seq_len 2048\""
	@echo "make <study> FROM=DIR    analyse measurements taken elsewhere (python -m mfulab measure ...)"
	@echo "make compare             machines side by side (notebook 10) into results/comparison/"
	@echo "make html                the course as a static site, one book per machine in site/<machine>/"
	@echo "                         (SITE_MACHINE=... for one); works offline, from the file system"
	@echo "make check-gpu           first run on a GPU machine: environment, CUDA tests, a tiny cuda run"
	@echo "                         of every study; one line per part (details in scratch/check-gpu/)"
	@echo "                         QUICK=1: environment, probes, capped CUDA tests, 3 tiny runs (<= 8 min)"
	@echo "make check-node          2+ local GPUs over NCCL: launcher and in-process torchrun checked"
	@echo "make wheelhouse          download every wheel into wheelhouse/ for an offline machine;"
	@echo "                         there: make env WHEELS=wheelhouse (TORCH_WHEEL= picks the torch build)"
	@echo "make test-env            add the tests', linter's and site's extras to .venv (make test does)"
	@echo "make clean               remove generated scratch (keeps .venv and results/)"

env: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
		{ echo "mfulab needs Python >= 3.10 (PYTHON=$(PYTHON))"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
ifneq ($(HAS_NVIDIA),yes)
	$(PIP_INSTALL) $(PIP_FROM) "$(TORCH_CPU)" $(if $(WHEELS),,$(TORCH_INDEX))
endif
	$(PIP_INSTALL) $(PIP_FROM) -e .
	$(COMPILE_VENV)
	$(PY) -m ipykernel install --sys-prefix --name mfulab --display-name "Python (mfulab)" >/dev/null
	@# JupyterLab opens the jupytext .py notebooks as notebooks (settings of this venv only)
	mkdir -p $(VENV)/share/jupyter/lab/settings
	printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}' \
		> $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

test-env: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP)
	$(PIP_INSTALL) $(PIP_FROM) -e ".[test]"
	$(COMPILE_VENV)
	touch $@

$(LAB_STAMP): $(STAMP)
	$(PIP_INSTALL) $(PIP_FROM) -e ".[lab]"
	$(COMPILE_VENV)
	touch $@

all: $(STAMP)
	$(PY) -m mfulab all --profile $(PROFILE) $(if $(FORCE),--force)

stability: $(STAMP)
	@test -n "$(STUDY)" || { echo "usage: make stability STUDY=<study id or calibration> [N=3] [PROFILE=cpu]"; exit 2; }
	$(PY) -m mfulab stability $(STUDY) -n $(N) --profile $(PROFILE) $(if $(KEEP),--keep $(KEEP)) $(ARGS)

compare: $(STAMP)
	$(PY) -m mfulab run compare --profile default

html: $(TEST_STAMP)
	$(PY) -m mfulab site $(if $(SITE_MACHINE),--machine $(SITE_MACHINE))

$(STUDIES): %: $(STAMP)
	$(PY) -m mfulab run $* --profile $(PROFILE) $(if $(FROM),--from $(FROM)) $(ARGS)

test: $(TEST_STAMP) lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

lint: $(TEST_STAMP)
	$(PY) -m ruff format --check lib tests notebooks
	$(PY) -m ruff check lib tests notebooks

format: $(TEST_STAMP)
	$(PY) -m ruff format lib tests notebooks
	$(PY) -m ruff check --fix lib tests notebooks

# The executed notebooks under results/ are read-only records (cells marked non-editable).
lab: $(LAB_STAMP)
	$(PY) -m jupyter lab --port $(PORT) --ServerApp.root_dir="$(CURDIR)" \
		--MultiKernelManager.default_kernel_name=mfulab \
		--ServerApp.contents_manager_class=mfulab.site.lab.ResultsReadOnlyContentsManager $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

list: $(STAMP)
	@$(PY) -m mfulab list

# This machine's calibration (matmul ceilings, DRAM bandwidth, all-reduce α–β), which every
# study reads; a study measures what is missing itself, so this is optional. REFRESH=1 re-measures.
calibrate: $(STAMP)
	$(PY) -m mfulab calibrate $(if $(REFRESH),--refresh)

# The README's course table is generated from the registry (lib/mfulab/studies/*/study.yaml).
readme: $(STAMP)
	$(PY) -m mfulab readme

wheelhouse:
	mkdir -p $(WHEELHOUSE)
	@# one resolution, so the project's torch range is met by TORCH_WHEEL and nothing else
	$(PYTHON) -m pip download --quiet --dest $(WHEELHOUSE) "$(TORCH_WHEEL)" "setuptools>=64" wheel ".[test]" \
		$(if $(TORCH_INDEX),$(TORCH_INDEX) --extra-index-url https://pypi.org/simple)
	rm -f $(WHEELHOUSE)/mfulab-*  # the project itself is installed from this checkout
	@echo "wheels in $(WHEELHOUSE)/; on the offline machine: make env WHEELS=$(WHEELHOUSE)"

# The first commands on a new GPU machine / node (README, "Run a study on your cluster").
# Without a venv, a python3 that already imports torch runs them as it is (a bare GPU image
# with no package registry: pytest, Jupyter and webdataset may be missing; their parts skip).
check-gpu check-node:
	@if test -f $(STAMP) || ! $(PYTHON) -c 'import torch' 2>/dev/null; then \
		$(MAKE) --no-print-directory test-env && $(PY) -m mfulab check $(@:check-%=%) $(if $(QUICK),--quick); \
	else \
		echo "no venv: $(PYTHON) with its own torch"; \
		PYTHONPATH=lib $(PYTHON) -m mfulab check $(@:check-%=%) $(if $(QUICK),--quick); \
	fi

clean:
	rm -rf scratch site .pytest_cache results/*/.tmp-* results/*/.old-*
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) lib/*.egg-info
