"""The unicache-agent .deb and .rpm (`make packages`): what they hold and declare, and what
installing, removing and purging them does to a clean Debian 12 root (chroot, dpkg and
rpm as a user runs them), with a good shim and with deliberately broken ones.

The same package booted in a systemd guest: tests/integration/test_agent_package_vm.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.packaging.chroot import (
    VERSION,
    Packages,
    build_agent_packages,
    copy_in,
    differences,
    in_root,
    inventory,
)

SHIM = "/usr/lib/unicache-agent/libunicache.so"
PRELOAD = "etc/ld.so.preload"
CONFFILES = {"etc/unicache-agent", "etc/unicache-agent/agent.conf"}


def _deb_field(deb: Path, field: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True,
                          check=True).stdout.strip()


def _deb_files(deb: Path) -> set[str]:
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[5].removeprefix(".") for line in out.splitlines()
            if not line.startswith("d")}


def test_the_deb_holds_the_agent_the_shim_its_unit_and_rule_and_declares_python_and_libc(
        packages: Packages) -> None:
    deb = packages.agent_deb
    assert _deb_field(deb, "Version") == f"{VERSION}-1"
    assert _deb_field(deb, "Depends") == "python3 (>= 3.9), libc6 (>= 2.34)"
    files = _deb_files(deb)
    assert {"/usr/bin/unicache-agent", SHIM, "/usr/lib/unicache-agent/uc_selftest",
            "/usr/lib/unicache-agent/unicache_agent/__main__.py",
            "/usr/lib/systemd/system/unicache-agent.service",
            "/usr/lib/udev/rules.d/60-unicache-agent.rules",
            "/etc/unicache-agent/agent.conf",
            "/usr/share/man/man8/unicache-agent.8.gz"} <= files
    assert not any("__pycache__" in f for f in files)
    conffiles = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True,
                               check=True).stdout
    assert b"conffiles" in conffiles
    # the shim is built for the package's architecture
    arch = _deb_field(deb, "Architecture")
    assert arch == subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                                  text=True, check=True).stdout.strip()


def test_the_rpm_is_the_same_description_with_rpm_names_for_python_and_glibc(
        packages: Packages) -> None:
    rpm = str(packages.agent_rpm)
    requires = subprocess.run(["rpm", "-qp", "--requires", rpm], capture_output=True,
                              text=True, check=True).stdout.splitlines()
    assert {"python3 >= 3.9", "glibc >= 2.34"} <= set(requires)
    listed = subprocess.run(["rpm", "-qpl", rpm], capture_output=True, text=True,
                            check=True).stdout.split()
    rpm_files = {f for f in listed if not f.endswith("/unicache_agent")}
    deb_files = _deb_files(packages.agent_deb)
    assert deb_files <= rpm_files, sorted(deb_files - rpm_files)
    info = subprocess.run(["rpm", "-qpi", rpm], capture_output=True, text=True,
                          check=True).stdout
    assert f"Version     : {VERSION}" in info and "Architecture: x86_64" in info


def test_install_preloads_the_shim_and_remove_then_purge_leave_the_system_as_before(
        packages: Packages, clean_root: Path) -> None:
    _install_remove_purge(packages, clean_root)


def test_on_debian_13_too(packages: Packages, clean_trixie_root: Path) -> None:
    """The same on Debian 13 (trixie: python 3.13, glibc 2.41): the shim built on Debian 12
    loads there, and purge leaves the root as before."""
    assert "13" in (clean_trixie_root / "etc/debian_version").read_text()
    _install_remove_purge(packages, clean_trixie_root)


def _install_remove_purge(packages: Packages, root: Path) -> None:
    assert not (root / PRELOAD).exists()
    deb = copy_in(root, packages.agent_deb)
    before = inventory(root)

    installed = in_root(root, "dpkg", "-i", deb)
    assert "unicache-agent:" not in installed.stderr, installed.stderr
    assert (root / PRELOAD).read_text() == SHIM + "\n"
    # every program now runs with the shim: they still work, and say nothing more
    ls = in_root(root, "ls", "/usr/lib/unicache-agent")
    assert "libunicache.so" in ls.stdout and ls.stderr == ""
    assert in_root(root, "unicache-agent", "--version").stdout.strip() == (
        f"unicache-agent {VERSION}")
    assert "--fanotify" in in_root(root, "unicache-agent", "--help").stdout
    assert in_root(root, "/usr/lib/unicache-agent/preload", "status").stdout == "enabled\n"

    in_root(root, "dpkg", "-r", "unicache-agent")
    # remove keeps the config file (a conffile), nothing else
    assert differences(before, inventory(root)) == [f"new {p}" for p in sorted(CONFFILES)]
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert differences(before, inventory(root)) == []


def test_a_preload_list_of_the_admin_keeps_its_lines_and_bytes_and_the_shim_goes_first(
        packages: Packages, clean_root: Path) -> None:
    root = clean_root
    other = "/usr/lib/x86_64-linux-gnu/libm.so.6"  # no newline at the end
    (root / PRELOAD).write_text(other)
    deb = copy_in(root, packages.agent_deb)
    before = inventory(root)
    in_root(root, "dpkg", "-i", deb)
    assert (root / PRELOAD).read_text().splitlines() == [SHIM, other]
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert (root / PRELOAD).read_text() == other
    assert differences(before, inventory(root)) == []


def test_a_list_whose_libraries_would_crash_every_program_beside_the_shim_is_left_alone(
        packages: Packages, clean_root: Path) -> None:
    """libc listed first hides libc's read() from the shim's RTLD_NEXT (found by this test:
    every program then crashed). The shim goes first; the check preloads the list as it
    will be, and a combination that still fails is refused, in one line."""
    root = clean_root
    listed = ("/usr/lib/x86_64-linux-gnu/libc.so.6\n"
              "/usr/lib/x86_64-linux-gnu/libm.so.6\n")
    (root / PRELOAD).write_text(listed)
    in_root(root, "dpkg", "-i", copy_in(root, packages.agent_deb))
    assert (root / PRELOAD).read_text() == SHIM + "\n" + listed
    assert in_root(root, "ls", "/").stderr == ""
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert (root / PRELOAD).read_text() == listed


def test_rpm_install_and_erase_run_the_same_scripts_with_rpm_arguments(
        packages: Packages, clean_root: Path) -> None:
    root = clean_root
    subprocess.run(["rpm", "--root", str(root), "--initdb"], check=True)
    # on a RHEL-compatible system these are systemd-udev's and filesystem's (the Debian
    # base has no man pages at all)
    for shared in ("usr/lib/udev/rules.d", "usr/share/man/man8"):
        (root / shared).mkdir(parents=True, exist_ok=True)
    before = inventory(root)
    # the Debian root has no rpm database of python3 and glibc: --nodeps
    subprocess.run(["rpm", "--root", str(root), "-i", "--nodeps", str(packages.agent_rpm)],
                   check=True, capture_output=True)
    assert (root / PRELOAD).read_text() == SHIM + "\n"
    assert in_root(root, "unicache-agent", "--version").stdout.strip().endswith(VERSION)
    subprocess.run(["rpm", "--root", str(root), "-e", "unicache-agent"], check=True,
                   capture_output=True)
    assert differences(before, inventory(root)) == []


def _broken_shim(kind: str, where: Path) -> Path:
    """A libunicache.so that crashes every program it is loaded into, or is no library."""
    shim = where / "libunicache.so"
    if kind == "not-a-library":
        shim.write_text("this is not an ELF file\n")
        return shim
    src = where / "crash.c"
    src.write_text("#include <stdlib.h>\n"
                   "__attribute__((constructor)) static void crash(void) { abort(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(shim), str(src)], check=True)
    return shim


@pytest.mark.parametrize("kind", ["crashes-every-program", "not-a-library"])
def test_a_broken_shim_is_never_preloaded_and_the_install_says_why_in_one_line(
        kind: str, packages: Packages, clean_root: Path, tmp_path: Path) -> None:
    broken = build_agent_packages(tmp_path / "out", _broken_shim(kind, tmp_path))
    root = clean_root
    deb = copy_in(root, broken.agent_deb)
    before = inventory(root)
    installed = in_root(root, "dpkg", "-i", deb)  # the install itself succeeds
    said = [line for line in installed.stderr.splitlines() if "unicache-agent:" in line]
    assert len(said) == 1, installed.stderr
    assert f"{SHIM} not added to /etc/ld.so.preload" in said[0]
    assert "does not load in a test process" in said[0]
    assert not (root / PRELOAD).exists()
    ls = in_root(root, "ls", "/")
    assert "usr" in ls.stdout.split() and ls.stderr == ""
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert differences(before, inventory(root)) == []
