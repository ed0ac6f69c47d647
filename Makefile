# rlscore — `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# A CPU build of torch beside the repo (on the dev/CI machines) saves fetching the CUDA build.
TORCH_WHEEL := $(wildcard ../shared/wheels/torch-*+cpu-*.whl)
TIMESTEPS ?= 20000
SEED ?= 1

.PHONY: help install test train eval bench demo clean

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if [ -n "$(TORCH_WHEEL)" ]; then echo "installing CPU torch from $(TORCH_WHEEL)"; \
	  $(PY) -m pip install --quiet "$(TORCH_WHEEL)"; fi
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(VENV)/.installed ## create .venv and install rlscore with its dev tools

test: install ## run the test suite
	$(PY) -m pytest

train: install ## train EE, LB and EL into models/ (two at a time), each evaluated into its sidecar
	@for p in EE LB; do $(VENV)/bin/rlscore-train --policy $$p --timesteps $(TIMESTEPS) --seed $(SEED) --out models --no-progress & done; wait
	$(VENV)/bin/rlscore-train --policy EL --timesteps $(TIMESTEPS) --seed $(SEED) --out models

eval: install ## evaluate the shipped models against the baselines (tables and plots in eval/)
	@for p in EE LB EL; do $(VENV)/bin/rlscore-eval --policy $$p --nodes 3,10,100 --out eval/$$p || exit 1; done

bench: install ## print training throughput and model inference figures
	$(PY) -m agent.bench

demo: install ## the thesis's test patterns in the simulator: where the pods land, per policy
	$(PY) -m agent.demo

clean: ## remove build output (keeps models/)
	rm -rf eval runs .pytest_cache
