# tools/sim/sim.mk — build the simulator's Rust core + PyO3 binding and install the
# `unicache-sim` wheel into .venv. Included by the top-level Makefile.
#
#   make sim-build     build (release, maturin) and install; rebuilt only when sources change
#   make sim-test-rust cargo test of the pure core crate (part of `make test`)
#   make sim-clean     remove the build products and the stamp

SIM_DIR      := tools/sim
SIM_VENV     ?= .venv
SIM_PY       := $(SIM_VENV)/bin/python
SIM_CARGO_BIN := $(shell command -v cargo 2>/dev/null || echo $(HOME)/.cargo/bin/cargo)
SIM_STAMP    := $(SIM_DIR)/target/.sim-installed
SIM_SOURCES  := $(shell find $(SIM_DIR)/core $(SIM_DIR)/py $(SIM_DIR)/python -type f \
                  \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' -o -name '*.toml' -o -name 'py.typed' \) \
                  -not -path '*/__pycache__/*' 2>/dev/null) \
                $(SIM_DIR)/Cargo.toml $(SIM_DIR)/Cargo.lock $(SIM_DIR)/pyproject.toml \
                $(SIM_DIR)/.cargo/config.toml

.PHONY: sim-build sim-test-rust sim-clean

sim-build: $(SIM_STAMP)

$(SIM_STAMP): $(SIM_SOURCES)
	@test -x $(SIM_CARGO_BIN) || { echo "sim-build: cargo not found (install rustup: https://rustup.rs)"; exit 1; }
	@test -x $(SIM_VENV)/bin/maturin || $(SIM_PY) -m pip install -q -r $(SIM_DIR)/requirements.txt
	rm -rf $(SIM_DIR)/target/wheels
	cd $(SIM_DIR) && PATH="$(dir $(SIM_CARGO_BIN)):$$PATH" $(abspath $(SIM_VENV))/bin/maturin build \
	    --release --locked --interpreter $(abspath $(SIM_PY)) -o target/wheels -q
	$(SIM_PY) -m pip install -q --force-reinstall --no-deps $(SIM_DIR)/target/wheels/unicache_sim-*.whl
	@touch $@

sim-test-rust:
	cd $(SIM_DIR) && PATH="$(dir $(SIM_CARGO_BIN)):$$PATH" cargo test --release --locked -p unicache-sim-core

sim-clean:
	rm -rf $(SIM_DIR)/target

SETUP_TARGETS += sim-build
