"""docs/agent.md's virt-customize recipe, as virt-customize runs it: each ``--run-command``
chrooted into the image (here a copy of the Debian 12 base), after the ``--upload``.
virt-customize itself is not run (its appliance would boot another kernel under TCG).
The cloud-init recipe runs in the systemd guest, by cloud-init at first boot:
tests/integration/test_agent_package_vm.py."""

from __future__ import annotations

from pathlib import Path

from tests.packaging.chroot import Packages, in_root
from tests.packaging.recipes import (
    cloud_init_package_path,
    cloud_init_runcmd,
    cloud_init_user_data,
    recipe,
    virt_customize,
)

SHIM = "/usr/lib/unicache-agent/libunicache.so"


def test_the_virt_customize_recipe_installs_the_package_into_an_image(
        packages: Packages, clean_root: Path) -> None:
    uploads, commands = virt_customize()
    assert [src for src, _ in uploads] == [packages.agent_deb.name]
    for _, dst in uploads:
        (clean_root / dst.lstrip("/")).write_bytes(packages.agent_deb.read_bytes())
    assert commands and commands[0].startswith("apt-get install")
    for command in commands:
        done = in_root(clean_root, "sh", "-c", command)
        assert "unicache-agent:" not in done.stderr, done.stderr
    assert (clean_root / "etc/ld.so.preload").read_text() == SHIM + "\n"
    assert in_root(clean_root, "ls", "/").stderr == ""
    assert not (clean_root / uploads[0][1].lstrip("/")).exists()


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
