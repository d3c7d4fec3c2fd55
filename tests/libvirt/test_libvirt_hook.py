"""The libvirt qemu hook: install/remove keep a previous hook; a started domain gets placed,
live and in its definition, and keeps its placement when it starts again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unicache.cpulist import parse_list
from unicache.errors import ConfigError
from unicache.host.libvirt.domain_xml import parse_domain
from unicache.host.libvirt.hook import (
    BACKUP_NAME,
    DEFAULT_HOOKS_DIR,
    MARKER,
    HookConfig,
    install_hook,
    remove_hook,
)
from unicache.host.libvirt.placement import read_metadata
from unicache.topology import Unify
from unicache.topology.sysfs import discover_topology

from tests.libvirt.conftest import PREFIX, URI, Libvirtd, wait_for

PREVIOUS = "#!/bin/sh\necho \"$1 $2\" >> {log}\ncat >/dev/null\nexit 0\n"


def test_install_keeps_the_previous_hook_and_remove_puts_it_back(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    previous = hooks / "qemu"
    previous.write_text(PREVIOUS.format(log=tmp_path / "log"))
    previous.chmod(0o750)
    before = previous.read_bytes()

    first = install_hook(HookConfig(state_dir=tmp_path / "state"), hooks)
    assert (first.action, first.backup) == ("installed", hooks / BACKUP_NAME)
    assert (hooks / BACKUP_NAME).read_bytes() == before
    assert MARKER in previous.read_text()
    assert previous.stat().st_mode & stat.S_IXUSR
    again = install_hook(HookConfig(unify=Unify("l2"), state_dir=tmp_path / "state"), hooks)
    assert again.action == "updated"
    assert "UNICACHE_HOOK_UNIFY=l2" in previous.read_text()
    assert (hooks / BACKUP_NAME).read_bytes() == before

    removed = remove_hook(hooks)
    assert removed.action == "removed"
    assert previous.read_bytes() == before
    assert stat.S_IMODE(previous.stat().st_mode) == 0o750
    assert not (hooks / BACKUP_NAME).exists()
    assert remove_hook(hooks).action == "not-installed"
    assert previous.read_bytes() == before


def test_install_refuses_to_lose_a_backup(tmp_path: Path) -> None:
    (tmp_path / "qemu").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / BACKUP_NAME).write_text("#!/bin/sh\nexit 1\n")
    with pytest.raises(ConfigError, match="move one away first"):
        install_hook(HookConfig(), tmp_path)
    assert (tmp_path / "qemu").read_text() == "#!/bin/sh\nexit 0\n"


def test_remove_leaves_a_foreign_hook_alone(tmp_path: Path) -> None:
    (tmp_path / "qemu").write_text("#!/bin/sh\nexit 0\n")
    assert remove_hook(tmp_path).action == "not-installed"
    assert (tmp_path / "qemu").exists()


def test_hook_places_a_started_domain_and_chains_the_previous_hook(
    libvirtd: Libvirtd, make_domain: Any, socket_dir: Path
) -> None:
    units = discover_topology().units(Unify("l2"))
    if len(units) < 2:
        pytest.skip("needs two cores to see a placement")
    calls = socket_dir / "previous.log"
    previous = DEFAULT_HOOKS_DIR / "qemu"
    DEFAULT_HOOKS_DIR.mkdir(parents=True, exist_ok=True)
    with _host_hooks_aside(socket_dir / "host-hooks", libvirtd):
        previous.write_text(PREVIOUS.format(log=calls))
        previous.chmod(0o755)
        dom = _hooked_domain(libvirtd, make_domain, socket_dir, calls, units)
    assert not (DEFAULT_HOOKS_DIR / BACKUP_NAME).exists()
    assert f"{PREFIX}-hooked" == dom


@contextlib.contextmanager
def _host_hooks_aside(backup: Path, libvirtd: Libvirtd) -> Iterator[None]:
    """Move the host's own qemu hook (and a backup of it) aside; put them back after, and
    restart libvirtd so that it runs them again."""
    names = [n for n in ("qemu", BACKUP_NAME) if (DEFAULT_HOOKS_DIR / n).exists()]
    backup.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.move(DEFAULT_HOOKS_DIR / name, backup / name)
    try:
        yield
    finally:
        for name in ("qemu", BACKUP_NAME):
            with contextlib.suppress(FileNotFoundError):
                (DEFAULT_HOOKS_DIR / name).unlink()
        for name in names:
            shutil.move(backup / name, DEFAULT_HOOKS_DIR / name)
        if names:
            libvirtd.restart()


def _hooked_domain(libvirtd: Libvirtd, make_domain: Any, socket_dir: Path, calls: Path,
                   units: Any) -> str:
    previous = DEFAULT_HOOKS_DIR / "qemu"
    state = socket_dir / "state"
    config = socket_dir / "unicache.toml"
    # other engineers' domains may run on the same 2 CPUs: room for all of them
    config.write_text("[place]\ncpu_overcommit = 16.0\n")
    try:
        install_hook(HookConfig(URI, Unify("l2"), state, config), DEFAULT_HOOKS_DIR,
                     sys.executable)
        libvirtd.restart()  # libvirtd looks for hooks when it starts
        missing = socket_dir / "agent" / "hooked.sock"  # 'prepare' creates the placeholder
        dom = make_domain("hooked", vcpus=2, channel=missing)
        assert missing.is_socket()
        conn = libvirtd.connect()
        live = conn.lookupByName(dom.name())

        # the background process logs its record after the last pin
        log = state / "hook.jsonl"
        wait_for(lambda: log.exists() and log.read_text().endswith("\n"), timeout=30,
                 what="the hook's placement record")
        pins = live.vcpuPinInfo(1)  # VIR_DOMAIN_AFFECT_LIVE
        wanted = [tuple(c in u.cpus for c in range(len(pins[0]))) for u in units[:2]]
        assert sorted(pins) == sorted(wanted)
        assert pins[0] != pins[1]  # one vCPU on each core: a die each
        record = json.loads((state / "hook.jsonl").read_text().splitlines()[-1])
        print(f"hook.jsonl: {json.dumps(record)}")  # shown with -rA (docs/placement.md)
        assert record["kind"] == "hook-placement" and record["vm"] == dom.name(), record
        assert [v["vcpu"] for v in record["vcpus"]] == [0, 1]
        assert record["memory"].startswith("nodes 0")
        assert "guest topology and cells unchanged" in record["guest"]
        # the definition says what was pinned: vCPUs, emulator and memory nodes
        _consistent(live, record)
        lines = calls.read_text().splitlines()
        assert f"{dom.name()} prepare" in lines and f"{dom.name()} started" in lines
        # started again, it keeps its placement (no oscillation)
        live.destroy()
        live.create()
        wait_for(lambda: len(log.read_text().splitlines()) == 2, timeout=30,
                 what="the hook's second record")
        again = json.loads(log.read_text().splitlines()[-1])
        print(f"hook.jsonl: {json.dumps(again)}")
        assert again["kind"] == "hook-placement" and "kept" in again["reason"], again
        assert live.vcpuPinInfo(1) == pins
        live.destroy()
        conn.close()
    finally:
        remove_hook(DEFAULT_HOOKS_DIR)
        assert not (DEFAULT_HOOKS_DIR / BACKUP_NAME).exists()
        assert previous.read_text() == PREVIOUS.format(log=calls)
        previous.unlink()
        libvirtd.restart()  # forget the hook
    assert not os.path.exists(DEFAULT_HOOKS_DIR / "qemu")
    return str(dom.name())


def _consistent(live: Any, record: dict[str, Any]) -> None:
    """The live and the persistent XML both carry the pins and memory nodes the hook set."""
    wanted = {v["vcpu"]: parse_list(v["cpus"]) for v in record["vcpus"]}
    for flags in (0, 2):  # live, VIR_DOMAIN_XML_INACTIVE
        text = live.XMLDesc(flags)
        xml = parse_domain(text)
        assert dict(xml.vcpupin) == wanted
        assert xml.emulatorpin == parse_list(record["emulator_cpus"])
        assert xml.numatune is not None and xml.numatune.nodeset == frozenset({0})
        assert read_metadata(ET.fromstring(text)) is not None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from unicache.cli import main; main()", *args],
        capture_output=True, text=True, check=False,
    )


def test_install_and_remove_hook_commands_report_in_json(tmp_path: Path) -> None:
    installed = _cli("install-hook", "--hooks-dir", str(tmp_path), "--unify", "l2",
                     "--state-dir", str(tmp_path / "state"), "--json")
    assert installed.returncode == 0, installed.stderr
    data = json.loads(installed.stdout)
    assert (data["action"], data["backup"]) == ("installed", None)
    assert "restart" in data["note"]
    assert MARKER in (tmp_path / "qemu").read_text()
    removed = _cli("remove-hook", "--hooks-dir", str(tmp_path), "--json")
    assert json.loads(removed.stdout)["action"] == "removed"
    assert not (tmp_path / "qemu").exists()
