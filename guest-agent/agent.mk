# guest-agent/agent.mk — included by the top Makefile.
# shim-build: guest-agent/shim/libunicache.so (and the test drivers uc_selftest and
# libuc_decide.so, the benchmark's driver uc_bench, its control libuc_null.so and its floor
# libuc_floor.so).
SHIM_DIR := guest-agent/shim
SHIM_SRCS := $(wildcard $(SHIM_DIR)/*.c $(SHIM_DIR)/*.h) $(SHIM_DIR)/Makefile

SHIM_OUTPUTS := $(addprefix $(SHIM_DIR)/,libunicache.so uc_selftest libuc_decide.so uc_bench \
	libuc_null.so libuc_floor.so)

$(SHIM_OUTPUTS) &: $(SHIM_SRCS)
	$(MAKE) -C $(SHIM_DIR) CC=gcc all

.PHONY: shim-build shim-clean agent-fuzz
shim-build: $(SHIM_OUTPUTS)

shim-clean:
	$(MAKE) -C $(SHIM_DIR) clean

# The host parser fuzz target with 1M inputs (CI runs a short version in `make test`).
agent-fuzz: setup
	UNICACHE_FUZZ_INPUTS=1000000 $(PY) -m pytest -q -p no:cacheprovider tests/channel/test_channel_fuzz.py -k mutated

SETUP_TARGETS += shim-build
# the shim's tests watch which system calls an open makes (tests/shim/test_shim_classify.py)
APT_PACKAGES += strace
