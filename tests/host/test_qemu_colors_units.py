"""Colored guest NUMA nodes, pure parts (no VM): the --numa grammar, node records, the backend
each node gets, QEMU's argv, finding the patched QEMU, host reservations, the daemon's view."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from unicache.errors import ConfigError
from unicache.host import qemu
from unicache.host.qemu import (
    BACKING_COLORED,
    BACKING_HUGEPAGE,
    BACKING_RAM,
    GuestImage,
    GuestNodeSpec,
    QemuVm,
    VmConfig,
    VmRecord,
    list_vms,
    parse_numa,
    plan_nodes,
)
from unicache.host.qemu import colored as hostcolors
from unicache.host.qemu.colored import QemuBinary, fallback_line, find_qemu, has_colored_backend
from unicache.host.qemu.source import QemuRegistrySource

REPO = Path(__file__).resolve().parents[2]
UNICACHE = str(Path(sys.executable).with_name("unicache"))


def _image(tmp_path: Path) -> GuestImage:
    return GuestImage(tmp_path, tmp_path / "vmlinuz", tmp_path / "initrd.img",
                      tmp_path / "rootfs.ext4", "6.1.0-test")


def _ticks(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rfind(")") + 2:].split()[19])


def _record(name: str, pid: int, ticks: int, numa: tuple[GuestNodeSpec, ...],
            hugepages: int = 0, maps: int = 0) -> VmRecord:
    return VmRecord(name, pid, ticks, "/q", "/a", False, "/c", "/log", 2, 1024, "tcg", numa,
                    "/run", 1.0, "/x/qemu", hugepages, maps)


def _fake_qemu(path: Path, colored: bool, calls: Path | None = None) -> Path:
    """A script answering ``-object help`` like a QEMU with or without the backend."""
    types = "memory-backend-ram\n  memory-backend-memfd\n" + (
        "  memory-backend-colored\n" if colored else "")
    count = f"echo x >> {calls}\n" if calls else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{count}printf 'List of user creatable objects:\\n  {types}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# ------------------------------------------------------------------------------- grammar


def test_parse_numa_reads_a_colored_memory_only_node() -> None:
    nodes = parse_numa("0-1:768/-:256@0-15", 2, 1024)
    assert [(n.node, set(n.cpus), n.memory_mib) for n in nodes] == [
        (0, {0, 1}, 768), (1, set(), 256)]
    assert nodes[0].colors == frozenset()
    assert nodes[1].colors == frozenset(range(16))
    assert nodes[1].backing == "" and nodes[1].ncolors == 0


def test_parse_numa_reads_color_lists_with_commas() -> None:
    nodes = parse_numa("0:512@0,4-5/1:512", 2, 1024)
    assert nodes[0].colors == frozenset({0, 4, 5}) and nodes[1].colors == frozenset()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0-1:768/-:256@", "'@' needs colors"),
        ("0-1:768/-:256@x", "bad color list 'x'"),
        ("0-1:768/-:256@3-1", "bad color list"),
        ("0-1:767/-:257@0-3", "numa node 0: 767 MiB is odd"),
        ("0-1:768/-:256@0-3@4", "bad color list"),
    ],
    ids=["empty-colors", "not-a-list", "reversed", "odd-mib", "two-ats"],
)
def test_parse_numa_refuses_bad_colored_layouts(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_numa(spec, 2, 1024)


def test_odd_mib_is_fine_without_colored_nodes() -> None:
    assert [n.memory_mib for n in parse_numa("0-1:767/-:257", 2, 1024)] == [767, 257]


# ------------------------------------------------------------------------------ records


def test_colored_node_round_trips_through_json() -> None:
    node = GuestNodeSpec(1, frozenset(), 256, frozenset({0, 1, 2, 9}), 512, BACKING_COLORED)
    raw = json.loads(json.dumps(node.to_json()))
    assert raw == {"node": 1, "cpus": "", "memory_mib": 256, "colors": "0-2,9",
                   "ncolors": 512, "backing": "colored"}
    assert GuestNodeSpec.from_json(raw) == node


def test_old_node_records_read_as_uncolored() -> None:
    node = GuestNodeSpec.from_json({"node": 0, "cpus": "0-1", "memory_mib": 512})
    assert node == GuestNodeSpec(0, frozenset({0, 1}), 512)
    assert node.to_json() == {"node": 0, "cpus": "0-1", "memory_mib": 512}


@pytest.mark.parametrize("bad", [{"backing": "disk"}, {"colors": 5}, {"ncolors": "8"}],
                         ids=["backing", "colors", "ncolors"])
def test_malformed_node_color_members_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="colors .str., ncolors .int. or backing"):
        GuestNodeSpec.from_json({"node": 0, "cpus": "", "memory_mib": 2, **bad})


def test_record_keeps_reservations_and_old_records_have_none() -> None:
    numa = (GuestNodeSpec(0, frozenset({0, 1}), 768, backing=BACKING_RAM),
            GuestNodeSpec(1, frozenset(), 256, frozenset(range(4)), 512, BACKING_HUGEPAGE))
    rec = _record("c1", 1, 2, numa, hugepages=128, maps=7)
    assert VmRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec
    raw = rec.to_json()
    for key in ("qemu", "hugepages_added", "max_map_count_added"):
        del raw[key]
    old = VmRecord.from_json(raw)
    assert (old.qemu, old.hugepages_added, old.max_map_count_added) == (
        "qemu-system-x86_64", 0, 0)


# ----------------------------------------------------------------------------- planning


def test_plan_uses_the_colored_backend_when_qemu_has_it() -> None:
    planned = plan_nodes(parse_numa("0-1:768/-:256@0-15", 2, 1024), True, 512)
    assert [(n.backing, n.ncolors) for n in planned] == [(BACKING_RAM, 0),
                                                         (BACKING_COLORED, 512)]


def test_plan_falls_back_to_hugepages_without_the_backend() -> None:
    planned = plan_nodes(parse_numa("0-1:768/-:256@0-15", 2, 1024), False, 512)
    assert [n.backing for n in planned] == [BACKING_RAM, BACKING_HUGEPAGE]


def test_plan_refuses_a_color_the_host_lacks() -> None:
    with pytest.raises(ConfigError, match="numa node 1: color 64 does not exist .* 64 page"):
        plan_nodes(parse_numa("0-1:768/-:256@0-64", 2, 1024), True, 64)


def test_guest_colors_of_each_backing() -> None:
    colors = frozenset({3, 4})
    assert GuestNodeSpec(1, frozenset(), 2, colors, 8, BACKING_COLORED).guest_colors() == colors
    # hugepages: guest colors equal host colors, every color may occur
    assert GuestNodeSpec(1, frozenset(), 2, colors, 8, BACKING_HUGEPAGE).guest_colors() == (
        frozenset(range(8)))
    assert GuestNodeSpec(0, frozenset({0}), 2, backing=BACKING_RAM).guest_colors() == frozenset()


# ----------------------------------------------------------------------------- argv


def test_command_line_uses_memory_backend_colored(tmp_path: Path) -> None:
    numa = plan_nodes(parse_numa("0-1:768/-:256@0-3,8-11", 2, 1024), True, 512)
    vm = QemuVm(VmConfig("c2", vcpus=2, memory_mib=1024, numa=numa), tmp_path)
    argv = vm.command_line(_image(tmp_path), "tcg", QemuBinary("/opt/q/qemu", True))
    assert argv[0] == "/opt/q/qemu"
    joined = " ".join(argv) + " "
    assert "memory-backend-ram,id=mem0,size=768M " in joined
    # the comma inside the color list is doubled (QEMU's option escaping)
    assert "memory-backend-colored,id=mem1,size=256M,colors=0-3,,8-11,ncolors=512 " in joined
    assert "-numa node,nodeid=1,memdev=mem1 " in joined


def test_command_line_falls_back_to_2m_hugepages(tmp_path: Path) -> None:
    numa = parse_numa("0-1:768/-:256@0-15", 2, 1024)  # not planned: command_line plans
    vm = QemuVm(VmConfig("c3", vcpus=2, memory_mib=1024, numa=numa), tmp_path)
    joined = " ".join(vm.command_line(_image(tmp_path), "tcg")) + " "
    assert joined.startswith("qemu-system-x86_64 ")
    assert "memory-backend-memfd,id=mem1,size=256M,hugetlb=on,hugetlbsize=2M " in joined
    assert "memory-backend-colored" not in joined


def test_fallback_is_said_in_one_line() -> None:
    line = fallback_line([1])
    assert "\n" not in line
    assert line == ("unicache: patched QEMU with memory-backend-colored not found (make qemu); "
                    "colored node 1 uses 2 MiB hugepages instead: guest colors equal host "
                    "colors within each 2 MiB page")
    assert "colored nodes 1,2 use 2 MiB" in fallback_line([2, 1])


# ------------------------------------------------------------------------ finding QEMU


def test_unicache_qemu_env_names_the_binary(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_qemu(tmp_path / "q-colored", colored=True)
    monkeypatch.setenv("UNICACHE_QEMU", str(fake))
    assert find_qemu(colored=True) == QemuBinary(str(fake), True)
    plain = _fake_qemu(tmp_path / "q-plain", colored=False)
    monkeypatch.setenv("UNICACHE_QEMU", str(plain))
    assert find_qemu(colored=True) == QemuBinary(str(plain), False)
    monkeypatch.setenv("UNICACHE_QEMU", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="UNICACHE_QEMU=.*missing is not an executable"):
        find_qemu(colored=True)


def test_patched_build_under_the_repo_is_found_for_colored_vms(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNICACHE_QEMU", raising=False)
    monkeypatch.chdir(tmp_path)  # no build/ here
    repo = tmp_path / "repo"
    fake = _fake_qemu(repo / "build" / "qemu" / "bin" / "qemu-system-x86_64", colored=True)
    assert find_qemu(colored=True, repo=repo) == QemuBinary(str(fake), True)
    # an uncolored VM keeps the system QEMU
    assert find_qemu(colored=False, repo=repo) == QemuBinary("qemu-system-x86_64", False)


def test_backend_detection_runs_qemu_once(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    fake = _fake_qemu(tmp_path / "q", colored=True, calls=calls)
    assert has_colored_backend(str(fake)) and has_colored_backend(str(fake))
    assert calls.read_text().count("x") == 1
    assert not has_colored_backend(str(tmp_path / "nothing"))


# ------------------------------------------------------------------------ reservations


def _pool(tmp_path: Path, nr: int, free: int, resv: int = 0) -> Path:
    pool = tmp_path / "hugepages-2048kB"
    pool.mkdir()
    for name, value in (("nr_hugepages", nr), ("free_hugepages", free),
                        ("resv_hugepages", resv)):
        (pool / name).write_text(f"{value}\n")
    return pool


def test_enough_free_hugepages_need_no_reservation(tmp_path: Path) -> None:
    pool = _pool(tmp_path, nr=200, free=150, resv=10)
    assert hostcolors.reserve_hugepages(128, pool) == 0
    assert (pool / "nr_hugepages").read_text().strip() == "200"


def test_missing_hugepages_are_reserved_and_given_back(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _pool(tmp_path, nr=10, free=10, resv=2)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    added = hostcolors.reserve_hugepages(128, pool)
    assert added == 120  # 8 usable, 120 missing
    assert (pool / "nr_hugepages").read_text().strip() == "130"
    hostcolors.release_hugepages(added, pool)
    assert (pool / "nr_hugepages").read_text().strip() == "10"


def test_missing_hugepages_without_root_is_one_clear_line(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _pool(tmp_path, nr=0, free=0)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match=r"need 64 free 2 MiB hugepages, 0 are free: run as "
                                          r"root or `echo 64 > .*nr_hugepages`"):
        hostcolors.reserve_hugepages(64, pool)


def test_no_hugepage_support_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no 2 MiB hugepages on this host"):
        hostcolors.reserve_hugepages(1, tmp_path / "absent")


def test_max_map_count_is_raised_for_large_colored_nodes(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    sysctl = tmp_path / "max_map_count"
    sysctl.write_text("65530\n")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert hostcolors.reserve_map_count(16384, sysctl) == 0  # 64 MiB fits
    added = hostcolors.reserve_map_count(65536, sysctl)  # 256 MiB does not
    assert int(sysctl.read_text()) == 65536 * 2 + 4096 == 65530 + added
    hostcolors.release_map_count(added, sysctl)
    assert int(sysctl.read_text()) == 65530
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ConfigError, match=r"sysctl -w vm.max_map_count=135168"):
        hostcolors.reserve_map_count(65536, sysctl)


def test_dead_vm_records_give_back_their_reservations(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[tuple[str, int]] = []
    monkeypatch.setattr(hostcolors, "release_hugepages", lambda n: given.append(("hp", n)))
    monkeypatch.setattr(hostcolors, "release_map_count", lambda n: given.append(("maps", n)))
    dead_proc = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = _ticks(dead_proc.pid)
    dead_proc.wait()
    rec = _record("gone", dead_proc.pid, ticks, (), hugepages=64, maps=5)
    (tmp_path / "gone.json").write_text(json.dumps(rec.to_json()))
    assert list_vms(tmp_path) == []
    assert given == [("hp", 64), ("maps", 5)]


def test_stop_gives_back_reservations_once(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[tuple[str, int]] = []
    monkeypatch.setattr(hostcolors, "release_hugepages", lambda n: given.append(("hp", n)))
    monkeypatch.setattr(hostcolors, "release_map_count", lambda n: given.append(("maps", n)))
    dead_proc = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = _ticks(dead_proc.pid)
    dead_proc.wait()
    rec = _record("halted", dead_proc.pid, ticks, (), hugepages=32, maps=0)
    (tmp_path / "halted.json").write_text(json.dumps(rec.to_json()))
    vm = QemuVm(VmConfig("halted"), tmp_path)
    assert vm.stop() == "not-running"
    assert vm.stop() == "not-running"
    assert given == [("hp", 32), ("maps", 0)]
    assert not (tmp_path / "halted.json").exists()


# -------------------------------------------------------------------- the daemon's view


def test_registry_source_reports_colored_guest_nodes(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICACHE_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(qemu.QemuVm, "vcpu_threads", lambda self: {0: 11, 1: 12})
    numa = (GuestNodeSpec(0, frozenset({0, 1}), 512, backing=BACKING_RAM),
            GuestNodeSpec(1, frozenset(), 256, frozenset(range(4)), 512, BACKING_COLORED),
            GuestNodeSpec(2, frozenset(), 256, frozenset(range(4)), 512, BACKING_HUGEPAGE))
    rec = _record("seen", os.getpid(), _ticks(os.getpid()), numa)
    (tmp_path / "seen.json").write_text(json.dumps(rec.to_json()))
    (vm,) = QemuRegistrySource(tmp_path).running()
    assert [(n.node, set(n.vcpus), n.memory_bytes) for n in vm.nodes] == [
        (0, {0, 1}, 512 << 20), (1, set(), 256 << 20), (2, set(), 256 << 20)]
    assert [n.colors for n in vm.nodes] == [frozenset(), frozenset(range(4)),
                                            frozenset(range(512))]


# --------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    ("numa", "message"),
    [("0-1:768/-:256@x", "bad color list 'x'"), ("0-1:767/-:257@0-1", "767 MiB is odd")],
    ids=["bad-colors", "odd-mib"],
)
def test_cli_bad_colored_numa_is_one_line_exit_2(tmp_path: Path, numa: str,
                                                 message: str) -> None:
    env = {**os.environ, "UNICACHE_STATE_DIR": str(tmp_path)}
    res = subprocess.run([UNICACHE, "vm", "start", "cbad", "--numa", numa], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
