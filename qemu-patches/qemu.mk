# qemu-patches/qemu.mk — included by the top Makefile. On demand only (slow: not in
# setup or test). See qemu-patches/README.md.
#   make qemu        fetch Debian 12's QEMU 7.2 source with apt, apply qemu-patches/7.2/series
#                    (memory-backend-colored), build qemu-system-x86_64 and install it to
#                    build/qemu/bin/qemu-system-x86_64
#   make qemu-test   boot a guest with a colored memory-only NUMA node on it (tests/qemu)
#   make qemu-clean  drop the build (keeps nothing)
# Idempotent: stamps under build/qemu-src/; ninja rebuilds only what changed.
QEMU_WORK := build/qemu-src
QEMU_SRC := $(QEMU_WORK)/qemu-7.2+dfsg
QEMU_BUILD := $(QEMU_SRC)/b
QEMU_PREFIX := build/qemu
QEMU_BIN := $(QEMU_PREFIX)/bin/qemu-system-x86_64
QEMU_SERIES_DIR := qemu-patches/7.2
# a private apt configuration: the system's sources and lists stay untouched
QEMU_APT_DIR := $(QEMU_WORK)/apt
QEMU_APT := apt-get -q -o Dir::Etc::SourceList=$(CURDIR)/$(QEMU_APT_DIR)/sources.list \
	-o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=$(CURDIR)/$(QEMU_APT_DIR)/lists \
	-o Dir::Cache=$(CURDIR)/$(QEMU_APT_DIR)/cache
QEMU_MIRROR ?= http://deb.debian.org
QEMU_BUILD_DEPS := dpkg-dev xz-utils ninja-build meson pkg-config libglib2.0-dev \
	libpixman-1-dev zlib1g-dev
# as few features as possible (2 cores): TCG + KVM, the default x86 devices, no docs;
# firmware from Debian's qemu-system-data / seabios / ipxe-qemu packages
QEMU_CONFIGURE_FLAGS := --prefix=$(CURDIR)/$(QEMU_PREFIX) --target-list=x86_64-softmmu \
	--disable-docs --disable-werror --without-default-features --enable-kvm --enable-tcg \
	--disable-install-blobs --firmwarepath=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu
QEMU_JOBS ?= $(shell nproc)

$(QEMU_WORK)/.deps-stamp: qemu-patches/qemu.mk
	@mkdir -p $(QEMU_WORK)
	@missing=$$(for p in $(QEMU_BUILD_DEPS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "qemu: not root, cannot install build packages:" $$missing; exit 1; fi; \
	  echo "qemu: installing build packages:" $$missing; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@touch $@

$(QEMU_WORK)/.fetch-stamp: | $(QEMU_WORK)/.deps-stamp
	@mkdir -p $(QEMU_APT_DIR)/lists/partial $(QEMU_APT_DIR)/cache
	@printf 'deb-src %s/debian bookworm main\ndeb-src %s/debian bookworm-updates main\ndeb-src %s/debian-security bookworm-security main\n' \
	  $(QEMU_MIRROR) $(QEMU_MIRROR) $(QEMU_MIRROR) > $(QEMU_APT_DIR)/sources.list
	@echo "qemu: fetching Debian 12's qemu source package"
	@$(QEMU_APT) update > $(QEMU_WORK)/apt-update.log 2>&1 \
	  || { tail -3 $(QEMU_WORK)/apt-update.log; exit 1; }
	@rm -rf $(QEMU_SRC) $(QEMU_WORK)/applied
	@cd $(QEMU_WORK) && $(QEMU_APT) source qemu > $(CURDIR)/$(QEMU_WORK)/apt-source.log 2>&1 \
	  || { tail -3 $(QEMU_WORK)/apt-source.log; exit 1; }
	@test -f $(QEMU_SRC)/configure || { echo "qemu: no $(QEMU_SRC) after apt-get source"; exit 1; }
	@touch $@

# Reverse the series applied before (kept in applied/) and apply the current one; then
# copy colormem from qemu-patches/colormem (the one source of truth for the algorithm).
$(QEMU_WORK)/.patch-stamp: $(QEMU_WORK)/.fetch-stamp $(QEMU_SERIES_DIR)/series \
		$(wildcard $(QEMU_SERIES_DIR)/*.patch) qemu-patches/colormem/colormem.c qemu-patches/colormem/colormem.h
	@set -e; applied=$(CURDIR)/$(QEMU_WORK)/applied; cd $(QEMU_SRC); \
	if [ -f $$applied/series ]; then \
	  for p in $$(tac $$applied/series); do patch -p1 -R -s --no-backup-if-mismatch < $$applied/$$p; done; \
	fi; \
	rm -rf $$applied; mkdir -p $$applied.new; \
	for p in $$(cat $(CURDIR)/$(QEMU_SERIES_DIR)/series); do \
	  echo "qemu: applying $$p"; \
	  patch -p1 -s --no-backup-if-mismatch < $(CURDIR)/$(QEMU_SERIES_DIR)/$$p; \
	  cp $(CURDIR)/$(QEMU_SERIES_DIR)/$$p $$applied.new/; \
	done; \
	cp $(CURDIR)/$(QEMU_SERIES_DIR)/series $$applied.new/; mv $$applied.new $$applied
	@cp qemu-patches/colormem/colormem.c qemu-patches/colormem/colormem.h $(QEMU_SRC)/backends/
	@touch $@

$(QEMU_WORK)/.configure-stamp: $(QEMU_WORK)/.patch-stamp qemu-patches/qemu.mk
	@set -e; if [ "$$(cat $(QEMU_WORK)/configure-flags 2>/dev/null)" != "$(QEMU_CONFIGURE_FLAGS)" ] \
	    || [ ! -f $(QEMU_BUILD)/build.ninja ]; then \
	  echo "qemu: configure $(QEMU_CONFIGURE_FLAGS)"; \
	  rm -rf $(QEMU_BUILD); mkdir -p $(QEMU_BUILD); \
	  cd $(QEMU_BUILD) && nice -n 10 ../configure $(QEMU_CONFIGURE_FLAGS) --meson=meson \
	    > ../configure.log 2>&1 || { tail -5 ../configure.log; exit 1; }; \
	  cd $(CURDIR) && echo "$(QEMU_CONFIGURE_FLAGS)" > $(QEMU_WORK)/configure-flags; \
	fi
	@touch $@

.PHONY: qemu qemu-test qemu-clean
qemu: $(QEMU_WORK)/.configure-stamp
	@echo "qemu: building qemu-system-x86_64 (nice -n 10, $(QEMU_JOBS) jobs; a first build takes long)"
	@cd $(QEMU_BUILD) && nice -n 10 ninja -j$(QEMU_JOBS) qemu-system-x86_64 > ../ninja.log 2>&1 \
	  || { grep -m5 -A5 'error' ../ninja.log; tail -3 ../ninja.log; exit 1; }
	@mkdir -p $(QEMU_PREFIX)/bin
	@cmp -s $(QEMU_BUILD)/qemu-system-x86_64 $(QEMU_BIN) \
	  || install -m 755 $(QEMU_BUILD)/qemu-system-x86_64 $(QEMU_BIN)
	@$(QEMU_BIN) -object help | grep -q memory-backend-colored \
	  || { echo "qemu: $(QEMU_BIN) lacks memory-backend-colored"; exit 1; }
	@echo "qemu: $(QEMU_BIN) ($$($(QEMU_BIN) --version | head -1)) with memory-backend-colored"

qemu-test: qemu setup image
	$(PY) -m pytest -q -p no:cacheprovider tests/qemu

qemu-clean:
	rm -rf $(QEMU_WORK) $(QEMU_PREFIX)
