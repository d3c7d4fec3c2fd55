# images/images.mk — included by the top Makefile. Guest image for the demo and the
# integration tests (not part of `setup`: `make demo` and tests/integration build it when needed).
#   make image         build/images/debian12/{image.json,vmlinuz,initrd.img,rootfs.ext4}
#   make image-systemd build/images/debian12-systemd/: the same with systemd, udev and
#                      cloud-init, no agent (tests/integration/test_agent_package_vm.py
#                      installs the package, by cloud-init at first boot)
#   make image-clean   drop the built image (keeps the debootstrap/kernel cache)
#   make image-purge   drop the image and its cache
IMAGE_DIR := build/images/debian12
IMAGE_INPUTS := images/build-image.sh images/initramfs/init $(wildcard images/guest/*.py) \
	$(wildcard guest-agent/unicache_agent/*.py guest-agent/install.sh) \
	guest-agent/shim/libunicache.so $(wildcard guest-agent/shim/uc_selftest)

SYSTEMD_IMAGE_DIR := build/images/debian12-systemd

$(IMAGE_DIR)/image.json: $(IMAGE_INPUTS)
	@bash images/build-image.sh $(IMAGE_DIR) init

$(SYSTEMD_IMAGE_DIR)/image.json: $(IMAGE_INPUTS) \
		$(wildcard images/guest/*.service images/guest/*.network images/guest/*.cfg)
	@bash images/build-image.sh $(SYSTEMD_IMAGE_DIR) systemd

.PHONY: image image-systemd image-clean image-purge
image: $(IMAGE_DIR)/image.json
image-systemd: $(SYSTEMD_IMAGE_DIR)/image.json

image-clean:
	rm -rf $(IMAGE_DIR) $(SYSTEMD_IMAGE_DIR)

image-purge:
	rm -rf build/images
