# unicache — top-level build. `make demo` and `make test` are the two commands a new user runs.
# Every target runs `setup` first; all are idempotent (stamp files under .venv/).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PATH := $(CURDIR)/$(VENV)/bin:$(HOME)/.cargo/bin:$(PATH)

# Fragments owned by the parts of the tree append to these.
SETUP_TARGETS :=
APT_PACKAGES := build-essential pkg-config
# installed without apt's recommends (for packages whose recommends are big and unneeded)
APT_PACKAGES_NO_RECOMMENDS :=
REQUIREMENTS := requirements.txt $(wildcard tools/sim/requirements.txt \
	guest-agent/requirements-test.txt images/requirements.txt)

include tools/sim/sim.mk
include guest-agent/agent.mk
include images/images.mk
include hypervisor/libvirt.mk
include qemu-patches/colormem/colormem.mk
include packaging/packages.mk
-include qemu-patches/qemu.mk

.PHONY: setup test lint typecheck pytest demo figures examples bench clean apt

# apt packages only when root and something is missing (a non-root user gets one line).
$(VENV)/.apt-stamp: Makefile
	@mkdir -p $(VENV)
	@missing() { for p in "$$@"; do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done; }; \
	full=$$(missing $(APT_PACKAGES)); lean=$$(missing $(APT_PACKAGES_NO_RECOMMENDS)); \
	if [ -n "$$full$$lean" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "setup: installing apt packages:" $$full $$lean; \
	    apt-get update -qq && export DEBIAN_FRONTEND=noninteractive && \
	    { [ -z "$$full" ] || apt-get install -y -qq $$full >/dev/null; } && \
	    { [ -z "$$lean" ] || apt-get install -y -qq --no-install-recommends $$lean >/dev/null; }; \
	  else echo "setup: not root, cannot install apt packages:" $$full $$lean "(install them and re-run)"; exit 1; fi; \
	fi
	@touch $@

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.pip-stamp: $(VENV)/bin/python $(REQUIREMENTS) hypervisor/pyproject.toml
	$(PIP) install -q $(addprefix -r ,$(REQUIREMENTS))
	$(PIP) install -q -e hypervisor
	@touch $@

setup: $(VENV)/.apt-stamp $(VENV)/.pip-stamp $(SETUP_TARGETS)

lint: setup
	$(VENV)/bin/ruff check hypervisor tests tools guest-agent
	$(VENV)/bin/ruff format --check hypervisor/unicache/policy
	cd hypervisor && $(abspath $(VENV))/bin/lint-imports
	cd tools/sim && PYTHONPATH=python $(abspath $(VENV))/bin/lint-imports

typecheck: setup
	$(VENV)/bin/mypy hypervisor/unicache
	MYPYPATH=hypervisor $(VENV)/bin/mypy --strict tools/sim/python/unicache_sim tests/sim tools/bench
	# the guest agent as Python 3.9 code (its pyproject: python_version 3.9, strict)
	cd guest-agent && $(abspath $(VENV))/bin/mypy unicache_agent

pytest: setup image
	$(PY) -m pytest -q tests

test: lint typecheck sim-test-rust pytest

demo: setup image
	@bash tools/demo.sh

# every seed paper's experiments in the simulator: docs/figures/*.png and docs/reproduction.md
figures: setup
	$(VENV)/bin/unicache-sim figures --out-dir docs/figures --doc docs/reproduction.md

# the example traces (examples/*.jsonl) from the simulator, fixed seeds (docs/trace.md)
examples: setup
	$(PY) tools/gen_traces.py

# every benchmark (shim, policy round, live daemon with real guests, simulator): JSON under
# build/bench/, tables into docs/PERFORMANCE.md's generated blocks (unicache bench record)
bench: setup image
	$(VENV)/bin/unicache bench record --out build/bench --doc docs/PERFORMANCE.md

clean:
	rm -rf $(VENV) build tools/sim/target
