"""The agent's part in colors and replicas: caps, placement fields, NUMA report fields."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from unicache_agent import protocol as p
from unicache_agent.counters import CounterHarvester
from unicache_agent.guest_facts import node_memory, shim_caps
from unicache_agent.shm import (
    ChunkCounts,
    CounterLayout,
    Harvest,
    ShmEntry,
)
from unicache_agent.table_writer import TableWriter

from tests.agent.test_agent_units import FakeHost

SHIM = Path(__file__).resolve().parents[2] / "guest-agent" / "shim" / "libunicache.so"
PLACE = {"v": 1, "type": "placement", "version": 5, "part": 0, "parts": 1,
         "chunk_size": 65536, "min_read_size": 0}


def _sysfs(tmp_path: Path, nodes: dict[int, tuple[int, int]],
           cpulists: dict[int, str] | None = None) -> Path:
    """A sysfs ``devices/system`` with 2 CPUs and nodes {id: (free kB, total kB)}, online,
    holding the CPUs ``cpulists`` says (default: CPU n on node n, the others none)."""
    root = tmp_path / "sys"
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "online").write_text("0-1\n")
    (root / "node").mkdir()
    (root / "node" / "online").write_text(",".join(str(n) for n in sorted(nodes)) + "\n")
    for n, (free, total) in nodes.items():
        d = root / "node" / f"node{n}"
        d.mkdir(parents=True)
        cpus = (cpulists or {}).get(n, str(n) if n < 2 else "")
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {n} MemTotal:       {total} kB\n"
                                   f"Node {n} MemFree:        {free} kB\n"
                                   f"Node {n} MemUsed:        {total - free} kB\n")
    return root


def test_shim_caps_come_from_the_built_shim_marker(tmp_path: Path) -> None:
    subprocess.run(["make", "-s", "-C", str(SHIM.parent), "libunicache.so"], check=True)
    assert shim_caps(str(SHIM)) == ("colors", "replicas")
    old = tmp_path / "old.so"
    old.write_bytes(b"\x7fELF an older shim without the marker")
    assert shim_caps(str(old)) == ()
    assert shim_caps(str(tmp_path / "absent.so")) == ()


def test_node_memory_from_sysfs_meminfo(tmp_path: Path) -> None:
    root = _sysfs(tmp_path, {0: (100, 400), 1: (7, 128)})
    assert node_memory(str(root), (0, 1, 2)) == ((0, 100 * 1024, 400 * 1024),
                                                (1, 7 * 1024, 128 * 1024))


def test_node_memory_counts_the_page_cache_the_kernel_frees_first_as_the_store_does(
        tmp_path: Path) -> None:
    from unicache_agent.numa_mem import node_headroom

    root = _sysfs(tmp_path, {0: (10, 400)})
    meminfo = root / "node" / "node0" / "meminfo"
    meminfo.write_text(meminfo.read_text() + "Node 0 Inactive(file):  200 kB\n")
    assert node_memory(str(root), (0,)) == ((0, 210 * 1024, 400 * 1024),)
    assert node_memory(str(root), (0,)) == node_headroom(str(root), (0,))


@pytest.mark.parametrize(("extra", "caps"), [
    ((), list(p.CAPS)), (("colors", "replicas", "bogus"), [*p.CAPS, "colors", "replicas"])],
    ids=["old-shim", "shim-with-caps"])
def test_hello_announces_colors_and_replicas_only_with_the_shim(
        tmp_path: Path, extra: tuple[str, ...], caps: list[str]) -> None:
    h = FakeHost(tmp_path, extra_caps=extra)
    assert h.handshake()["caps"] == caps


def test_color_and_replica_fields_reach_the_table_and_unknown_nodes_are_ignored(
        tmp_path: Path) -> None:
    h = FakeHost(tmp_path, extra_caps=p.SHIM_CAPS,
                 sys_root=str(_sysfs(tmp_path, {0: (1, 2), 1: (1, 2)})))
    h.handshake(("colors", "replicas"))
    h.send({**PLACE, "entries": [["a", 0, [], True, 0, 1, [0, 1]],
                                 ["a", 1, [1], True, 3, 7, [0]],      # no node 7 here
                                 ["a", 2, [], True, 0, -1, [0, 5]],   # no node 5 here
                                 ["b", 0, [0], False, 2]]})
    assert h.recv()["type"] == "applied"
    got = {e.chunk if e.file_id == 0xA else 10: e for e in h.table.read_active()[3]}
    assert (got[0].color_node, got[0].replica_nodes) == (1, frozenset({0, 1}))
    assert got[0].vcpus == frozenset()
    assert (got[1].color_node, got[1].replica_nodes) == (-1, frozenset({0}))
    assert (got[2].color_node, got[2].replica_nodes) == (-1, frozenset())
    assert (got[10].color_node, got[10].replica_nodes) == (-1, frozenset())
    assert h.agent.field_errors == 2
    assert h.agent.errors == 2  # reported in health.errors


def test_fields_are_ignored_when_the_host_did_not_grant_the_caps(tmp_path: Path) -> None:
    h = FakeHost(tmp_path, extra_caps=p.SHIM_CAPS,
                 sys_root=str(_sysfs(tmp_path, {0: (1, 2), 1: (1, 2)})))
    h.handshake(("colors",))  # the host speaks colors only
    h.send({**PLACE, "entries": [["a", 0, [], True, 0, 1, [1]]]})
    assert h.recv()["type"] == "applied"
    [e] = h.table.read_active()[3]
    assert (e.color_node, e.replica_nodes) == (1, frozenset())
    assert h.agent.field_errors == 1


@pytest.mark.parametrize("entry", [
    ["a", 0, [], True, 0, p.MAX_NODES, []], ["a", 0, [], True, 0, -2, []],
    ["a", 0, [], True, 0, "1", []], ["a", 0, [], True, 0, 1, [1, 1]],
    ["a", 0, [], True, 0, 1, [p.MAX_NODES]], ["a", 0, [], True, 0, 1],
    ["a", 0, [], True, 0, 1, {"0": 1}]],
    ids=["color-too-big", "color-below-minus-one", "color-string", "replica-twice",
         "replica-too-big", "six-items", "replicas-not-list"])
def test_malformed_color_or_replica_fields_are_bad_field(tmp_path: Path,
                                                         entry: list[object]) -> None:
    h = FakeHost(tmp_path, extra_caps=p.SHIM_CAPS)
    h.handshake(("colors", "replicas"))
    h.send({**PLACE, "entries": [entry]})
    reply = h.recv()
    assert (reply["type"], reply["kind"]) == ("error", "bad-field")


@pytest.mark.parametrize("granted", [True, False], ids=["granted", "old-host"])
def test_report_carries_home_node_node_reads_and_memory_only_when_granted(
        tmp_path: Path, granted: bool) -> None:
    h = FakeHost(tmp_path, extra_caps=p.SHIM_CAPS,
                 sys_root=str(_sysfs(tmp_path, {0: (10, 20), 1: (3, 4)})))
    h.handshake(p.SHIM_CAPS if granted else ())
    counts = (ChunkCounts(0xA, 2, 8192, 3, 0, 0, 0, ((1, 8192),), 1, ((0, 1), (1, 2))),
              ChunkCounts(0xB, 0, 10, 1, 0, 0, 0, (), -1, ()))
    msg = json.loads(h.agent.build_report(Harvest(counts, 0, 1), [(0xC, 0, 2)], 1.0))
    if granted:
        assert msg["chunks"] == [["a", 2, 8192, 3, 0, [[1, 8192]], 1, [[0, 1], [1, 2]]],
                                 ["b", 0, 10, 1, 0, [], -1, []]]
        assert msg["node_memory"] == [[0, 10240, 20480], [1, 3072, 4096]]
    else:  # an older host would refuse the longer records
        assert [len(c) for c in msg["chunks"]] == [6, 6]
        assert "node_memory" not in msg
    assert msg["files"] == [["c", 0, 2]]


def test_shared_entries_counters_and_generations_round_trip(tmp_path: Path) -> None:
    t = TableWriter(str(tmp_path / "t"), nbuckets=64)
    entries = [ShmEntry(1, 0, frozenset(), True, 0, 3, frozenset({0, 31})),
               ShmEntry(1, 1, frozenset({2}), False, 9, -1, frozenset()),
               ShmEntry(2, 0, frozenset({0}), True, 1, 40, frozenset({32, 1}))]
    t.publish(1, 65536, 0, entries)
    back = {(e.file_id, e.chunk): e for e in t.read_active()[3]}
    assert back[(1, 0)] == entries[0] and back[(1, 1)] == entries[1]
    # outside the shared layout's 32 nodes: dropped, never wrapped onto another node
    assert (back[(2, 0)].color_node, back[(2, 0)].replica_nodes) == (-1, frozenset({1}))
    layout = CounterLayout.of(max_vcpus=2, nslots=64, ngens=64)
    assert layout.slot_size == 128  # the 64-byte head + 8 * 2 vCPU cells, rounded up
    c = CounterHarvester(str(tmp_path / "c"), layout)
    (tmp_path / "c" / "0").write_bytes(layout.header() + bytes(layout.size - 64))
    (tmp_path / "c" / "0").chmod(0o600)
    g = c.generation(77, uid=0)
    c.bump_generation(77)
    assert c.generation(77, uid=0) == g + 2
    assert c.stats().replica_serves == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")
def test_fanotify_modify_of_a_process_without_shim_calls_on_modify(tmp_path: Path) -> None:
    from unicache_agent.fanotify import FanotifyCapture
    from unicache_agent.shm import file_id_of

    f = tmp_path / "x"
    f.write_bytes(b"a")
    seen: list[int] = []
    cap = FanotifyCapture(99, str(tmp_path), on_modify=seen.append)
    subprocess.run(["sh", "-c", f"echo more >> {f}"], check=True)
    cap.poll()
    cap.close()
    st = f.stat()
    assert file_id_of(99, st.st_dev, st.st_ino) in seen


def test_one_node_guest_reports_that_node_as_home_without_the_shim_asking(
        tmp_path: Path) -> None:
    h = FakeHost(tmp_path, extra_caps=p.SHIM_CAPS, sys_root=str(_sysfs(tmp_path, {0: (1, 2)})))
    h.handshake(p.SHIM_CAPS)
    counts = (ChunkCounts(0xA, 0, 10, 2, 0, 0, 0, (), -1, ((0, 2),)),
              ChunkCounts(0xA, 1, 0, 0, 1, 0, 0, (), -1, ()))  # written, never read
    msg = json.loads(h.agent.build_report(Harvest(counts, 0, 1), [], 1.0))
    assert [c[6] for c in msg["chunks"]] == [0, -1]


def test_bumps_reach_a_replaced_file_and_hold_one_descriptor_per_user(tmp_path: Path) -> None:
    layout = CounterLayout.of(max_vcpus=2, nslots=64, ngens=64)
    c = CounterHarvester(str(tmp_path / "c"), layout)
    user = tmp_path / "c" / "0"

    def make() -> None:
        fresh = tmp_path / "c" / "0.new"
        fresh.write_bytes(layout.header() + bytes(layout.size - 64))
        fresh.chmod(0o600)
        fresh.rename(user)  # a new inode under the same name, as a shim replaces its file

    make()
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        c.bump_generation(77)
    assert c.generation(77, uid=0) == 100
    assert len(os.listdir("/proc/self/fd")) == fds_before + 1  # the one file, held
    make()
    c.bump_generation(77)
    assert c.generation(77, uid=0) == 2  # the new file, not the held old one
    assert len(os.listdir("/proc/self/fd")) == fds_before + 1
    user.unlink()
    c.bump_generation(77)
    assert len(os.listdir("/proc/self/fd")) == fds_before  # gone user, descriptor closed
    c.close()
