# hypervisor/libvirt.mk — included by the top Makefile: the libvirt backend's dependencies
#   apt: libvirt-dev + pkg-config to build libvirt-python; libvirt-daemon-system and
#        libvirt-clients (libvirtd, virtlogd, virsh) for tests/libvirt, which use the host's libvirtd or start one
#   pip: hypervisor/requirements-libvirt.txt (libvirt-python)
#   make libvirt-test   only the libvirt tests (a real libvirtd; about a minute here)
APT_PACKAGES += libvirt-daemon-system libvirt-clients libvirt-dev pkg-config qemu-system-x86
REQUIREMENTS += hypervisor/requirements-libvirt.txt

# a stamp made before this fragment existed must not hide the new packages
$(VENV)/.apt-stamp: hypervisor/libvirt.mk
# libvirt-python compiles against libvirt-dev: apt before pip
$(VENV)/.pip-stamp: $(VENV)/.apt-stamp hypervisor/requirements-libvirt.txt

.PHONY: libvirt-test
libvirt-test: setup
	$(PY) -m pytest -q tests/libvirt
