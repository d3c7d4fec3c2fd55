"""docs/agent.md's recipes, read from the page. The virt-customize recipe runs as the page
writes it, with the real virt-customize (its appliance boots the guest image's kernel, under
TCG here: tests/packaging/guestfs.py) on a copy of the guest image's disk, which then boots
under QEMU to show the package's effect. The cloud-init recipe runs in the systemd guest, by
cloud-init at first boot: tests/integration/test_agent_package_vm.py."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from unicache.host.qemu import QemuVm, VmConfig, ensure_image

from tests.packaging.chroot import Packages
from tests.packaging.guestfs import guestfs_env
from tests.packaging.recipes import (
    cloud_init_package_path,
    cloud_init_runcmd,
    cloud_init_user_data,
    recipe,
    virt_customize,
    virt_customize_argv,
)

SHIM = "/usr/lib/unicache-agent/libunicache.so"
#: virt-customize's appliance under TCG on a busy 2-core host, then the package's install
VIRT_CUSTOMIZE_TIMEOUT_S = 1200.0
BOOT_TIMEOUT_S = 420.0


def _in_disk(disk: Path, path: str) -> bool:
    """Whether the ext4 image ``disk`` has ``path`` (read offline, by debugfs)."""
    done = subprocess.run(["debugfs", "-R", f"stat {path}", str(disk)], capture_output=True,
                          text=True, check=True)
    return "File not found" not in done.stderr


def test_the_virt_customize_recipe_installs_the_package_into_an_image(
        packages: Packages, tmp_path: Path) -> None:
    uploads, commands = virt_customize()
    assert [src for src, _ in uploads] == [packages.agent_deb.name]
    assert commands and commands[0].startswith("apt-get install")
    assert shutil.which("virt-customize"), "no virt-customize: `make setup` installs it"
    image = ensure_image()
    copy = tmp_path / "image"
    copy.mkdir()
    for name in ("image.json", image.kernel.name, image.initrd.name):
        shutil.copy(image.directory / name, copy / name)
    disk = copy / image.disk.name
    subprocess.run(["cp", "--sparse=always", str(image.disk), str(disk)], check=True)
    assert not _in_disk(disk, "/etc/ld.so.preload")  # the image preloads nothing (docs/images.md)

    # the page's command, only its image replaced, run where the package is
    argv = virt_customize_argv(str(disk))
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=packages.agent_deb.parent, capture_output=True, text=True,
                          env=guestfs_env(image, tmp_path / "state"),
                          timeout=VIRT_CUSTOMIZE_TIMEOUT_S)
    print(f"virt-customize took {time.monotonic() - t0:.0f} s")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert not _in_disk(disk, uploads[0][1])  # the recipe removed what it uploaded

    vm = QemuVm(VmConfig("uc-virtc", vcpus=1, memory_mib=512, image_dir=copy),
                tmp_path / "state")
    vm.start()
    try:
        print(f"the customized image's runner answered {vm.wait_for_boot(BOOT_TIMEOUT_S):.0f} s"
              " after QEMU started")
        res = vm.run_in_guest(["sh", "-c", "dpkg-query -W -f '${Status}\\n' unicache-agent; "
                               "dpkg -S " + SHIM + "; test -e /etc/ld.so.preload; "
                               "echo preload=$?"], timeout=120)
        assert res.exit_code == 0, res.stdout + res.stderr
        # scoped by default: the package preloads the shim nowhere
        assert res.stdout.splitlines() == [
            "install ok installed", f"unicache-agent: {SHIM}", "preload=1"], res.stdout
        res = vm.run_in_guest(["grep", "-c", SHIM, "/proc/self/maps"], timeout=120)
        assert (res.exit_code, res.stdout.strip()) == (1, "0"), res.stdout + res.stderr
        # scoped to a program: started without LD_PRELOAD it has the shim mapped, ls runs
        res = vm.run_in_guest(["unicache-agent", "scope", "add", "exe:/usr/bin/grep"],
                              timeout=300)
        assert res.exit_code == 0, res.stdout + res.stderr
        res = vm.run_in_guest(["grep", "-c", SHIM, "/proc/self/maps"], timeout=120)
        assert res.exit_code == 0 and int(res.stdout) > 0, res.stdout + res.stderr
        res = vm.run_in_guest(["ls", "/"], timeout=120)
        assert (res.exit_code, res.stderr) == (0, ""), res.stderr
        assert "usr" in res.stdout.split(), res.stdout
        vm.stop(timeout=120.0)
    finally:
        vm.stop(5.0, True)


def test_the_cloud_init_recipe_fetches_the_package_of_make_packages(
        packages: Packages) -> None:
    fetch, install = cloud_init_runcmd()
    assert fetch[0] == "curl" and fetch[-1].endswith("/" + packages.agent_deb.name)
    assert install[:3] == ["apt-get", "install", "-y"]
    assert install[3] == fetch[fetch.index("-o") + 1]


def test_the_cloud_init_user_data_of_the_vm_test_is_the_recipe_with_its_origin_replaced() -> None:
    page = recipe("cloud-init").splitlines()
    served = cloud_init_user_data("http://10.0.2.2:8123").splitlines()
    changed = [(a, b) for a, b in zip(page, served, strict=True) if a != b]
    assert len(changed) == 1, changed
    old, new = changed[0]
    url = cloud_init_runcmd()[0][-1]
    assert old.replace(url, "http://10.0.2.2:8123" + cloud_init_package_path()) == new
    assert served[0] == "#cloud-config"
