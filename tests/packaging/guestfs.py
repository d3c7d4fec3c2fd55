"""How the recipe tests run libguestfs's tools (virt-customize): the environment that boots
their appliance with the guest image's cloud kernel, under TCG where KVM cannot boot it.

libguestfs runs its tools' work in a small appliance VM that supermin builds from the host's
packages and a host kernel. A host without one in /boot (a container, like the project's
machines) gets the cloud kernel `make image` already caches, with its modules
(``SUPERMIN_KERNEL``, ``SUPERMIN_MODULES``, ``SUPERMIN_KERNEL_VERSION``: supermin(1)).
libguestfs picks KVM whenever /dev/kvm opens; on a nested host whose KVM cannot boot a stock
kernel (docs/images.md "Accelerator") that appliance would never come up, so the project's
accelerator probe decides, and ``force_tcg`` follows it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from unicache.host.qemu import GuestImage
from unicache.host.qemu.accel import cache_dir, choose_accel


def appliance_modules(image: GuestImage) -> Path:
    """The modules of the image's kernel: ``lib/modules/VERSION`` of the kernel layer that
    images/build-image.sh extracted (and ran ``depmod`` on) beside the image's base layer."""
    meta = json.loads((image.directory / "image.json").read_text(encoding="utf-8"))
    cache = Path(meta["base_rootfs"]).parent
    modules = (cache / f"kernel-{meta['kernel_package']}" / "root/lib/modules"
               / image.kernel_version)
    assert (modules / "modules.dep").is_file(), f"no depmod'ed kernel modules at {modules}"
    return modules


def guestfs_env(image: GuestImage, state: Path) -> dict[str, str]:
    """The environment for a libguestfs tool: the direct backend (QEMU, no libvirtd), the
    image's kernel and modules for the appliance, and TCG unless the probe found KVM
    (``state``: where the probe's result is cached when /run/unicache is not writable)."""
    accel = choose_accel(image.kernel, image.initrd, cache_dir(state))
    env = {**os.environ, "LIBGUESTFS_BACKEND": "direct",
           "SUPERMIN_KERNEL": str(image.kernel.resolve()),
           "SUPERMIN_MODULES": str(appliance_modules(image)),
           "SUPERMIN_KERNEL_VERSION": image.kernel_version}
    if accel.accel == "tcg":
        env["LIBGUESTFS_BACKEND_SETTINGS"] = "force_tcg"
    return env
