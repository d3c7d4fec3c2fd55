# packaging/packages.mk — included by the top Makefile.
#   make packages   build/packages/: unicache-agent .deb and .rpm (guest), unicache .deb
#                   (host) and the unicache wheel, each from one description
#                   (packaging/build-packages.sh; the version is the top-level VERSION file)
# nfpm is installed into build/tools/nfpm-VERSION with `go install`, pinned: v2.45.0 is the newest
# release whose dependencies all come from the Go module proxy (v2.46 and later need
# go.digitalxero.dev modules).
NFPM_VERSION := v2.45.0
NFPM := build/tools/nfpm-$(NFPM_VERSION)/nfpm
PACKAGES_DIR := build/packages
# help2man: the agent's man page from its --help; python3-venv: the host package's venv;
# rpm: the tests read and install the .rpm
APT_PACKAGES += help2man python3-venv rpm
# libguestfs-tools: tests/packaging/test_recipes.py runs docs/agent.md's virt-customize recipe
# with the real tool. Without its recommends (a host kernel, exim4, ghostscript...) Debian 12
# installs 92 new packages, 37 MB to download and 132 MB on disk, not 144, 133 MB and 626 MB
# (`apt-get install --assume-no [--no-install-recommends] libguestfs-tools`, 2026-11-26); its
# appliance boots the guest image's cloud kernel instead (tests/packaging/guestfs.py).
APT_PACKAGES_NO_RECOMMENDS += libguestfs-tools
PACKAGE_INPUTS := VERSION packaging/build-packages.sh $(wildcard packaging/host/*) \
	requirements.txt hypervisor/requirements-libvirt.txt images/requirements.txt \
	tools/sim/requirements.txt tools/sim/pyproject.toml \
	packaging/unicache.service $(wildcard guest-agent/packaging/* guest-agent/unicache_agent/*.py) \
	guest-agent/unicache-agent.service $(wildcard docs/*.md) hypervisor/pyproject.toml \
	$(shell find hypervisor/unicache -name '*.py' -o -name '*.toml' 2>/dev/null)

$(VENV)/.apt-stamp: packaging/packages.mk

$(NFPM):
	@command -v go >/dev/null || { echo "packages: Go >= 1.25 is needed to install nfpm (go.dev/dl; Debian 12's golang-go is 1.19)"; exit 1; }
	@echo "packages: go install nfpm $(NFPM_VERSION) into $(dir $(NFPM)) (a few minutes the first time)"
	GOBIN=$(abspath $(dir $(NFPM))) go install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	@touch $@

$(PACKAGES_DIR)/.built: $(NFPM) $(PACKAGE_INPUTS) guest-agent/shim/libunicache.so \
	guest-agent/shim/libuc_null.so guest-agent/shim/libuc_floor.so $(SIM_STAMP)
	NFPM=$(abspath $(NFPM)) bash packaging/build-packages.sh all $(PACKAGES_DIR)
	@touch $@

.PHONY: packages packages-clean
packages: setup $(PACKAGES_DIR)/.built

packages-clean:
	rm -rf $(PACKAGES_DIR)

# supermin (it builds libguestfs's appliance) copies the host's /lib/modules before the kernel
# modules it is given, and stops at `lstat: No such file or directory: /lib/modules` on a
# host without a kernel (a container, like this project's machines): an empty one will do.
.PHONY: guestfs-host
guestfs-host: $(VENV)/.apt-stamp
	@[ -d /lib/modules ] || if [ "$$(id -u)" = 0 ]; then mkdir -p /lib/modules && \
	  echo "setup: created an empty /lib/modules (libguestfs's supermin needs one)"; \
	else echo "setup: not root, cannot create /lib/modules (libguestfs's supermin needs it)"; exit 1; fi

SETUP_TARGETS += guestfs-host
