"""The unicache-agent .deb and .rpm (`make packages`): what they hold and declare, and what
installing, scoping the shim (`unicache-agent scope`), upgrading, removing and purging do to
a clean Debian 12 root (chroot, dpkg and rpm as a user runs them), with a good shim and with
deliberately broken ones. The shim is scoped by default: an install preloads it nowhere.

The same package booted in a systemd guest: tests/integration/test_agent_package_vm.py.
"""

from __future__ import annotations

import json
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
SHIM_CONF = "etc/unicache-agent/shim.conf"
CONFFILES = {"etc/unicache-agent", "etc/unicache-agent/agent.conf", SHIM_CONF}
#: a service scoped with `unicache-agent scope add unit:web.service` (it need not exist)
DROPIN = "etc/systemd/system/web.service.d/50-unicache-shim.conf"
#: what remove leaves: the conffiles, and nothing else
LEFT_BY_REMOVE = [f"new {p}" for p in sorted(CONFFILES)]


def _deb_field(deb: Path, field: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True,
                          check=True).stdout.strip()


def _deb_files(deb: Path) -> set[str]:
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[5].removeprefix(".") for line in out.splitlines()
            if not line.startswith("d")}


def test_the_deb_holds_the_agent_the_shim_its_unit_and_rule_and_declares_python_and_libc(
        packages: Packages, tmp_path: Path) -> None:
    deb = packages.agent_deb
    assert _deb_field(deb, "Version") == f"{VERSION}-1"
    assert _deb_field(deb, "Depends") == "python3 (>= 3.9), libc6 (>= 2.34)"
    files = _deb_files(deb)
    assert {"/usr/bin/unicache-agent", SHIM, "/usr/lib/unicache-agent/uc_selftest",
            "/usr/lib/unicache-agent/uc_bench", "/usr/lib/unicache-agent/preload",
            "/usr/lib/unicache-agent/libuc_null.so", "/usr/lib/unicache-agent/libuc_floor.so",
            "/usr/lib/unicache-agent/unicache_agent/__main__.py",
            "/usr/lib/unicache-agent/unicache_agent/scope.py",
            "/usr/lib/systemd/system/unicache-agent.service",
            "/usr/lib/udev/rules.d/60-unicache-agent.rules",
            "/etc/unicache-agent/agent.conf", "/" + SHIM_CONF,
            "/usr/share/man/man8/unicache-agent.8.gz"} <= files
    assert not any("__pycache__" in f for f in files)
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tmp_path / "x")], check=True)
    assert (tmp_path / "x/DEBIAN/conffiles").read_text().split() == [
        "/etc/unicache-agent/agent.conf", "/" + SHIM_CONF]
    assert (tmp_path / "x/DEBIAN/preinst").is_file()
    # shim.conf ships as comments only: the shim runs in no process until a scope says
    shipped = (tmp_path / "x" / SHIM_CONF).read_text().splitlines()
    assert shipped and all(line.startswith("#") or not line.strip() for line in shipped)
    # the agent never runs under its own shim
    unit = (tmp_path / "x/usr/lib/systemd/system/unicache-agent.service").read_text()
    assert "Environment=UNICACHE_DISABLE=1" in unit.splitlines()
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


def test_install_preloads_nothing_scopes_apply_and_go_and_purge_leaves_the_system_as_before(
        packages: Packages, clean_root: Path) -> None:
    _install_scope_remove_purge(packages, clean_root)


def test_on_debian_13_too(packages: Packages, clean_trixie_root: Path) -> None:
    """The same on Debian 13 (trixie: python 3.13, glibc 2.41): the shim built on Debian 12
    loads there, and purge leaves the root as before."""
    assert "13" in (clean_trixie_root / "etc/debian_version").read_text()
    _install_scope_remove_purge(packages, clean_trixie_root)


def _scope(root: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return in_root(root, "unicache-agent", "scope", *argv, check=check)


def _said(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines a package's scripts (or the CLI) said to the administrator."""
    return [line for line in done.stderr.splitlines() if "unicache-agent:" in line]


def _install_scope_remove_purge(packages: Packages, root: Path) -> None:
    assert not (root / PRELOAD).exists()
    deb = copy_in(root, packages.agent_deb)
    before = inventory(root)

    installed = in_root(root, "dpkg", "-i", deb)
    assert _said(installed) == [], installed.stderr
    # scoped by default: the shim runs nowhere, the global list is untouched
    assert not (root / PRELOAD).exists()
    assert in_root(root, "/usr/lib/unicache-agent/preload", "status").stdout == "disabled\n"
    assert _scope(root, "list").stdout.startswith("no scope")
    assert in_root(root, "unicache-agent", "--version").stdout.strip() == (
        f"unicache-agent {VERSION}")
    assert "--fanotify" in in_root(root, "unicache-agent", "--help").stdout

    # a program and a service scoped: the list, after the load check, and a drop-in
    added = _scope(root, "add", "exe:/usr/bin/ls", "unit:web.service")
    assert "restart the unit" in added.stdout, added.stdout
    assert (root / PRELOAD).read_text() == SHIM + "\n"
    assert f"Environment=LD_PRELOAD={SHIM}" in (root / DROPIN).read_text().splitlines()
    ls = in_root(root, "ls", "/usr/lib/unicache-agent")
    assert "libunicache.so" in ls.stdout and ls.stderr == ""
    assert [json.loads(_scope(root, "list", "--json").stdout)["scopes"][i]["target"]
            for i in (0, 1)] == ["exe:/usr/bin/ls", "unit:web.service"]

    in_root(root, "dpkg", "-r", "unicache-agent")
    # remove takes the drop-in and the list's line out; shim.conf, a conffile, keeps them
    assert not (root / DROPIN).parent.exists() and not (root / PRELOAD).exists()
    assert differences(before, inventory(root)) == LEFT_BY_REMOVE
    # and an install applies them again
    again = in_root(root, "dpkg", "-i", deb)
    assert _said(again) == [], again.stderr
    assert (root / PRELOAD).read_text() == SHIM + "\n" and (root / DROPIN).is_file()
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert differences(before, inventory(root)) == []


def test_an_upgrade_keeps_the_scopes_and_checks_the_new_shim_before_listing_it(
        packages: Packages, clean_root: Path) -> None:
    root = clean_root
    deb = copy_in(root, packages.agent_deb)
    before = inventory(root)
    in_root(root, "dpkg", "-i", deb)
    _scope(root, "add", "exe:/usr/bin/ls", "unit:web.service")
    upgraded = in_root(root, "dpkg", "-i", deb)  # the same version again: an upgrade's scripts
    assert _said(upgraded) == [], upgraded.stderr
    assert (root / PRELOAD).read_text() == SHIM + "\n" and (root / DROPIN).is_file()
    assert "exe /usr/bin/ls" in (root / SHIM_CONF).read_text().splitlines()
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert differences(before, inventory(root)) == []


def _as_before_scopes(root: Path) -> None:
    """Make an installed root look like one a version before scopes left: the shim in a
    list that version created, and no shim.conf (it shipped none)."""
    (root / PRELOAD).write_text(SHIM + "\n")
    (root / "var/lib/unicache-agent").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/unicache-agent/preload-created").touch()
    (root / SHIM_CONF).unlink()


def test_a_deb_upgrade_from_a_version_that_preloaded_everywhere_says_so_in_one_line(
        packages: Packages, clean_root: Path) -> None:
    root = clean_root
    deb = copy_in(root, packages.agent_deb)
    before = inventory(root)
    in_root(root, "dpkg", "-i", deb)
    _as_before_scopes(root)
    upgraded = in_root(root, "dpkg", "-i", deb)
    said = _said(upgraded)
    assert len(said) == 1, upgraded.stderr
    assert "no longer preloaded in every process" in said[0] and "scope add" in said[0]
    assert not (root / PRELOAD).exists()  # the list it had created, empty again, is gone
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert differences(before, inventory(root)) == []


def test_an_rpm_upgrade_from_a_version_that_preloaded_everywhere_takes_the_line_out(
        packages: Packages, clean_root: Path) -> None:
    """rpm runs the new %post before the old %preun: the line is still there then."""
    root = _rpm_root(clean_root)
    rpm = str(packages.agent_rpm)
    subprocess.run(["rpm", "--root", str(root), "-i", "--nodeps", rpm], check=True,
                   capture_output=True)
    _as_before_scopes(root)
    upgraded = subprocess.run(["rpm", "--root", str(root), "-U", "--replacepkgs", "--nodeps",
                               rpm], check=True, capture_output=True, text=True)
    said = _said(upgraded)
    assert len(said) == 1 and "no longer preloaded in every process" in said[0], upgraded.stderr
    assert not (root / PRELOAD).exists()


def test_a_preload_list_of_the_admin_keeps_its_lines_and_bytes_and_the_shim_goes_first(
        packages: Packages, clean_root: Path) -> None:
    root = clean_root
    other = "/usr/lib/x86_64-linux-gnu/libm.so.6"  # no newline at the end
    (root / PRELOAD).write_text(other)
    deb = copy_in(root, packages.agent_deb)
    before = inventory(root)
    in_root(root, "dpkg", "-i", deb)
    assert (root / PRELOAD).read_text() == other  # installing scopes nothing
    _scope(root, "add", "cgroup:/system.slice/web.service")
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
    _scope(root, "add", "exe:/usr/bin/ls")
    assert (root / PRELOAD).read_text() == SHIM + "\n" + listed
    assert in_root(root, "ls", "/").stderr == ""
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert (root / PRELOAD).read_text() == listed


def _rpm_root(root: Path) -> Path:
    subprocess.run(["rpm", "--root", str(root), "--initdb"], check=True)
    # on a RHEL-compatible system these are systemd-udev's and filesystem's (the Debian
    # base has no man pages at all)
    for shared in ("usr/lib/udev/rules.d", "usr/share/man/man8"):
        (root / shared).mkdir(parents=True, exist_ok=True)
    return root


def test_rpm_install_and_erase_run_the_same_scripts_with_rpm_arguments(
        packages: Packages, clean_root: Path) -> None:
    root = _rpm_root(clean_root)
    before = inventory(root)
    # the Debian root has no rpm database of python3 and glibc: --nodeps
    subprocess.run(["rpm", "--root", str(root), "-i", "--nodeps", str(packages.agent_rpm)],
                   check=True, capture_output=True)
    assert not (root / PRELOAD).exists()
    assert in_root(root, "unicache-agent", "--version").stdout.strip().endswith(VERSION)
    _scope(root, "add", "exe:/usr/bin/ls", "unit:web.service")
    assert (root / PRELOAD).read_text() == SHIM + "\n" and (root / DROPIN).is_file()
    subprocess.run(["rpm", "--root", str(root), "-e", "unicache-agent"], check=True,
                   capture_output=True)
    # rpm keeps a changed config file as .rpmsave (it has no purge); nothing else is left
    assert differences(before, inventory(root)) == [
        "new etc/unicache-agent", "new etc/unicache-agent/shim.conf.rpmsave"]


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
def test_a_broken_shim_installs_but_is_never_scoped_and_the_cli_says_why_in_one_line(
        kind: str, packages: Packages, clean_root: Path, tmp_path: Path) -> None:
    broken = build_agent_packages(tmp_path / "out", _broken_shim(kind, tmp_path))
    root = clean_root
    deb = copy_in(root, broken.agent_deb)
    before = inventory(root)
    installed = in_root(root, "dpkg", "-i", deb)  # the install itself succeeds, quietly
    assert _said(installed) == [], installed.stderr
    for target in ("exe:/usr/bin/ls", "unit:web.service"):
        refused = _scope(root, "add", target, check=False)
        assert refused.returncode == 1 and len(_said(refused)) == 1, refused.stderr
        assert "does not load in a test process" in _said(refused)[0]
    assert not (root / PRELOAD).exists() and not (root / DROPIN).exists()
    ls = in_root(root, "ls", "/")
    assert "usr" in ls.stdout.split() and ls.stderr == ""
    in_root(root, "dpkg", "-P", "unicache-agent")
    assert differences(before, inventory(root)) == []
