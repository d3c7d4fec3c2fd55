"""Shared-memory layout 5, agent side: file entries, the CPUs' nodes, packed counter cells,
TABLE_NUMA. Bytes are decoded here by hand from uc_layout.h, not through shm.py's structs."""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import pytest
from unicache_agent import protocol as p
from unicache_agent import shm
from unicache_agent.counters import CounterHarvester
from unicache_agent.cpu_nodes import parse_cpulist
from unicache_agent.errors import ShmError
from unicache_agent.shm import CounterLayout, CpuNodes, ShmEntry
from unicache_agent.table_writer import TableWriter

from tests.agent.test_agent_numa import PLACE, _sysfs
from tests.agent.test_agent_units import FakeHost

LAYOUT_H = Path(__file__).resolve().parents[2] / "guest-agent" / "shim" / "uc_layout.h"
ENTRY = struct.Struct("<QQIIHHI4Q")  # file_id chunk flags budget color pad replicas mask[4]
M64 = (1 << 64) - 1
USED, COLOR, REPLICA, HOMES = 1, 4, 8, 16


def _defines() -> dict[str, int]:
    """The integer #defines of uc_layout.h."""
    out = {}
    for name, value in re.findall(r"^#define (UC_\w+) (0x[0-9a-f]+|\d+)u?(?:ll|ull)?\b",
                                  LAYOUT_H.read_text(), re.M):
        out[name] = int(value, 0)
    return out


def test_constants_mirror_uc_layout_h() -> None:
    mirrored = {"UC_LAYOUT_VERSION": shm.LAYOUT_VERSION, "UC_ENTRY_HOMES": shm.ENTRY_HOMES,
                "UC_FILE_CHUNK": shm.FILE_CHUNK, "UC_TABLE_VALID": shm.TABLE_VALID,
                "UC_TABLE_HOMES": shm.TABLE_HOMES, "UC_TABLE_NUMA": shm.TABLE_NUMA,
                "UC_NO_NODE": shm.NO_NODE, "UC_CELL_BYTES_BITS": shm.CELL_BYTES_BITS,
                "UC_MAX_VCPUS": shm.MAX_VCPUS, "UC_MAX_NODES": shm.MAX_NODES,
                "UC_SAMPLE_SHIFT_MAX": shm.SAMPLE_SHIFT_MAX}
    defines = _defines()
    assert {name: defines.get(name) for name in mirrored} == mirrored
    # [uc_table_hdr 64][uc_table_cpus 256][to 4 KiB][buffer 0][buffer 1], each buffer
    # [uc_table_buf 64][file filter][entries], its head one page
    assert (shm.TABLE_BUFS_OFFSET, shm.BUF_HEAD_LEN) == (4096, 4096) == (
        defines["UC_TABLE_BUFS_OFF"], defines["UC_BUF_HEAD_LEN"])
    assert shm.FILTER_BYTES == defines["UC_FILTER_BYTES"] == 4096 - 64
    # uc_slot_size: the 64-byte head and one u64 cell per vCPU, rounded up to 64
    assert [CounterLayout.of(max_vcpus=n).slot_size for n in (1, 8, 9, 256)] == [
        128, 128, 192, 64 + 2048]
    # uc_region_len: a 64-byte head, two u32 index entries per slot (64 B aligned), slots
    assert [CounterLayout.of(max_vcpus=2, nslots=n).region_len for n in (1, 8, 8192)] == [
        64 + 64 + 128, 64 + 64 + 8 * 128, 64 + 65536 + 8192 * 128]


def _raw_entry(path: Path, nbuckets: int, file_id: int, chunk: int) -> tuple[int, ...] | None:
    """The entry a shim finds for (file_id, chunk) in the active buffer, probing the file."""
    data = path.read_bytes()
    active = struct.unpack_from("<I", data, 20)[0] & 1
    base = 4096 + active * (4096 + nbuckets * 64) + 4096
    slot = shm.bucket_hash(file_id, chunk) & (nbuckets - 1)
    for _ in range(nbuckets):
        e = ENTRY.unpack_from(data, base + slot * 64)
        if not e[2] & USED:
            return None
        if e[:2] == (file_id, chunk):
            return e
        slot = (slot + 1) & (nbuckets - 1)
    return None


def test_file_entries_carry_the_union_of_their_chunks_flags(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = TableWriter(str(path), nbuckets=64)
    entries = [ShmEntry(1, 0, frozenset(), color_node=2),
               ShmEntry(1, 5, frozenset({3}), replica_nodes=frozenset({0, 1})),
               ShmEntry(2, 0, frozenset()),                     # placed, nothing to add
               ShmEntry(3, 0, frozenset({shm.MAX_VCPUS + 1})),  # no vCPU the mask holds
               ShmEntry(4, 0, frozenset({0}), color_node=1),
               ShmEntry(4, 0, frozenset())]                     # the last one is kept
    assert t.publish(7, 65536, 0, entries) == 5  # chunk entries; the files' besides
    snap = t.snapshot()
    assert snap.nentries == 5 + 4
    assert snap.files == ((1, USED | COLOR | REPLICA | HOMES), (2, USED), (3, USED),
                          (4, USED))
    assert snap.flags == shm.TABLE_VALID | shm.TABLE_HOMES  # NUMA only when asked
    assert sorted((e.file_id, e.chunk) for e in t.read_active()[3]) == [
        (1, 0), (1, 5), (2, 0), (3, 0), (4, 0)]  # chunk entries only
    raw = _raw_entry(path, 64, 1, (1 << 64) - 1)
    assert raw == (1, M64, USED | COLOR | REPLICA | HOMES, 0, 0, 0, 0, 0, 0, 0, 0)
    assert _raw_entry(path, 64, 4, M64) == (4, M64, USED, 0, 0, 0, 0, 0, 0, 0, 0)
    # the next table's files only: file 1's entry goes with its chunks
    t.publish(8, 65536, 0, [ShmEntry(2, 1, frozenset({1}))])
    assert t.snapshot().files == ((2, USED | HOMES),)
    assert _raw_entry(path, 64, 1, M64) is None


def _filter_holds(path: Path, nbuckets: int, file_id: int) -> bool:
    """The active buffer's file filter, read as the shim reads it (uc_filter_may_hold)."""
    data = path.read_bytes()
    active = struct.unpack_from("<I", data, 20)[0] & 1
    head = shm.buffer_offset(nbuckets, active) + 64
    return all(data[head + bit // 8] >> (bit % 8) & 1 for bit in shm.filter_bits(file_id))


def test_every_publish_carries_the_writers_open_sample_after_the_flags(tmp_path: Path) -> None:
    path = tmp_path / "t"
    sample = shm.OpenSample(64 * 1024, 3)
    t = TableWriter(str(path), nbuckets=64, sample=sample)
    for version in (1, 2):  # both buffers
        t.publish(version, 65536, 0, [])
        data = path.read_bytes()
        base = 4096 + (struct.unpack_from("<I", data, 20)[0] & 1) * (4096 + 64 * 64)
        # uc_table_buf: seq version chunk_size min_read_size (u64) nentries flags (u32), then
        # sample_bytes (u32) and sample_shift (u8)
        assert struct.unpack_from("<IB", data, base + 40) == (64 * 1024, 3)
        assert t.snapshot().sample == sample
    assert TableWriter(str(tmp_path / "u"), nbuckets=64).sample == shm.EVERY_OPEN


@pytest.mark.parametrize("bad", [(-1, 3), (1 << 32, 3), (65536, 16), (65536, -1)])
def test_an_open_sample_out_of_the_layouts_range_is_refused(bad: tuple[int, int]) -> None:
    with pytest.raises(ShmError, match="open sample"):
        shm.OpenSample(*bad)


def test_the_file_filter_holds_every_named_file_and_few_others(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = TableWriter(str(path), nbuckets=4096)
    named = [shm.mix64(i) for i in range(1, 1001)]  # file ids are mixed, as the shim's are
    t.publish(1, 65536, 0, [ShmEntry(fid, 0, frozenset()) for fid in named])
    assert all(_filter_holds(path, 4096, fid) for fid in named)  # never a false negative
    others = [shm.mix64(i) for i in range(10_001, 30_001)]
    false_positives = sum(_filter_holds(path, 4096, fid) for fid in others)
    # two bits per file in 32,256: (1 - e^(-2000/32256))^2 = 0.36 % of unnamed files probe
    assert false_positives < 0.01 * len(others)
    # the next table's filter is its own: file 1's bits go with its entries
    t.publish(2, 65536, 0, [ShmEntry(named[0], 0, frozenset())])
    assert _filter_holds(path, 4096, named[0])
    assert sum(_filter_holds(path, 4096, fid) for fid in named[1:]) < 5


@pytest.mark.parametrize("chunk", [M64, -1], ids=["sentinel", "minus-one"])
def test_a_chunk_entry_at_the_file_index_is_refused(tmp_path: Path, chunk: int) -> None:
    t = TableWriter(str(tmp_path / "t"), nbuckets=64)
    with pytest.raises(ShmError, match="names file entries"):
        t.publish(1, 65536, 0, [ShmEntry(9, chunk, frozenset())])


def test_capacity_counts_file_entries(tmp_path: Path) -> None:
    t = TableWriter(str(tmp_path / "t"), nbuckets=64)  # capacity 32
    assert t.publish(1, 65536, 0, [ShmEntry(9, i, frozenset()) for i in range(31)]) == 31
    assert t.snapshot().nentries == 32
    with pytest.raises(ShmError, match="at most 32 entries: 32 chunks of 1 files need 33"):
        t.publish(2, 65536, 0, [ShmEntry(9, i, frozenset()) for i in range(32)])
    assert t.publish(3, 65536, 0, [ShmEntry(i + 1, 0, frozenset()) for i in range(16)]) == 16
    with pytest.raises(ShmError, match="at most 32 entries"):
        t.publish(4, 65536, 0, [ShmEntry(i + 1, 0, frozenset()) for i in range(17)])
    assert t.snapshot().version == 3  # a refused table leaves the last one in place


def test_default_buckets_hold_the_hosts_largest_table_in_as_many_files(
        tmp_path: Path) -> None:
    t = TableWriter(str(tmp_path / "t"), counters=CounterLayout.of(max_vcpus=1, nslots=64))
    assert t.capacity >= 2 * p.MAX_TABLE_ENTRIES
    n = p.MAX_TABLE_ENTRIES
    assert t.publish(1, 65536, 0, [ShmEntry(i + 1, i, frozenset()) for i in range(n)]) == n
    assert t.snapshot().nentries == 2 * n


def _fake_sysfs(root: Path, online: str | None, cpulists: dict[int, str],
                present: str | None = None) -> str:
    if online is not None:
        (root / "node").mkdir(parents=True)
        (root / "node" / "online").write_text(online + "\n")
    for n, cpus in cpulists.items():
        (root / "node" / f"node{n}").mkdir(parents=True)
        (root / "node" / f"node{n}" / "cpulist").write_text(cpus + "\n")
    if present is not None:
        (root / "cpu").mkdir(parents=True)
        (root / "cpu" / "present").write_text(present + "\n")
    return str(root)


def test_cpu_nodes_and_node_mask_reach_the_table_from_sysfs(tmp_path: Path) -> None:
    # node 3 has memory only; CPU 3 is on no node; node 40 is beyond the layout's 32
    root = _fake_sysfs(tmp_path / "sys", "0-1,3,40",
                       {0: "0-1", 1: "2,4-5", 3: "", 40: "6"})
    nodes = CpuNodes.from_sysfs(root)
    path = tmp_path / "t"
    TableWriter(str(path), nbuckets=64, cpu_nodes=nodes).close()
    data = path.read_bytes()
    ff = shm.NO_NODE
    assert data[64:320] == bytes([0, 0, 1, ff, 1, 1] + [ff] * 250)
    assert struct.unpack_from("<I", data, 48)[0] == 0b1011  # node_mask
    assert nodes.nodes_with_cpus() == frozenset({0, 1})


def test_without_numa_in_sysfs_every_present_cpu_is_on_node_0(tmp_path: Path) -> None:
    nodes = CpuNodes.from_sysfs(_fake_sysfs(tmp_path / "sys", None, {}, present="0-3"))
    assert nodes.cpu_node[:5] == (0, 0, 0, 0, shm.NO_NODE)
    assert nodes.node_mask == 1


def test_a_restarted_agent_rewrites_the_cpus_nodes_and_keeps_the_salt(tmp_path: Path) -> None:
    path = tmp_path / "t"
    one = TableWriter(str(path), nbuckets=64, cpu_nodes=CpuNodes.of({0: 0, 1: 0}, [0]))
    salt = one.salt
    one.close()
    two = TableWriter(str(path), nbuckets=64, cpu_nodes=CpuNodes.of({0: 0, 1: 1}, [0, 1]))
    assert two.salt == salt
    data = path.read_bytes()
    assert data[64:67] == bytes([0, 1, shm.NO_NODE])
    assert struct.unpack_from("<I", data, 48)[0] == 0b11


def test_cpulist_parsing_is_bounded_and_skips_junk() -> None:
    assert parse_cpulist("0-2,5,x,7-3,250-9999\n", 256) == frozenset(
        {0, 1, 2, 5, *range(250, 256)})
    assert parse_cpulist("\n", 256) == frozenset()
    with pytest.raises(ShmError):
        CpuNodes((0,) * 10, 1)  # not one node per possible CPU


def _cell(runs: int, nbytes: int) -> int:
    return runs << 40 | nbytes  # uc_cell


def _user_file(directory: Path, nslots: int, max_vcpus: int, ngens: int,
               slots: dict[int, tuple[list[int], list[int]]]) -> Path:
    """A counters file as a shim fills it: region 0 active, ``slots`` {number: (head,
    cells)} in it. Its index is left empty: the agent reads every slot with a key."""
    slot_size = (64 + 8 * max_vcpus + 63) // 64 * 64
    first = 64 + (8 * nslots + 63) // 64 * 64  # the region's head, then its index
    region = bytearray(first + nslots * slot_size)
    struct.pack_into("<Q", region, 0, max(slots, default=-1) + 1)  # next
    for i, (head, cells) in slots.items():
        struct.pack_into("<8Q", region, first + i * slot_size, *head)
        struct.pack_into(f"<{len(cells)}Q", region, first + i * slot_size + 64, *cells)
    header = struct.pack("<IIIIII2QQIIQ", 0x54434355, 5, nslots, max_vcpus, 0, slot_size,
                         0, 0, 3, 0, ngens, 2)
    path = directory / str(os.geteuid())
    path.write_bytes(header + bytes(2048) + region + bytes(len(region)) + bytes(64 + 8 * ngens))
    path.chmod(0o600)
    return path


def test_harvest_derives_reads_bytes_and_node_reads_from_packed_cells(tmp_path: Path) -> None:
    # CPUs 0 and 1 on node 0, CPU 2 on node 1, CPU 3 on no node
    nodes = CpuNodes.of({0: 0, 1: 0, 2: 1}, [0, 1])
    layout = CounterLayout.of(max_vcpus=4, nslots=64, ngens=64)
    c = CounterHarvester(str(tmp_path / "c"), layout, nodes)
    big = _cell((1 << 24) - 1, (1 << 40) - 1)  # both fields at their widths
    path = _user_file(tmp_path / "c", 64, 4, 64, {
        # key file chunk writes migrations nt_reads home pad
        5: ([shm.slot_key(0xA, 2), 0xA, 2, 1, 4, 5, 2, 0],
            # runs and bytes; bytes only (a continued read); runs only; a CPU on no node
            [_cell(2, 8192), _cell(0, 4096), _cell(3, 0), _cell(1, 100)]),
        9: ([shm.slot_key(0xB, 0), 0xB, 0, 0, 0, 0, shm.HOME_BUSY, 0], [0, 0, big, 0]),
        11: ([shm.slot_key(0xC, 0), 0xC, 0, 2, 0, 0, 33, 0], [0, 0, 0, 0]),  # written only
    })
    h = c.harvest(0)
    got = {(x.file_id, x.chunk): x for x in h.chunks}
    a = got[(0xA, 2)]
    assert (a.reads, a.bytes_read, a.writes, a.migrations, a.nt_reads) == (6, 12388, 1, 4, 5)
    assert a.vcpu_bytes == ((0, 8192), (1, 4096), (3, 100))
    assert a.node_reads == ((0, 2), (1, 3))
    assert a.home_node == 1
    b = got[(0xB, 0)]
    assert (b.reads, b.bytes_read, b.vcpu_bytes) == ((1 << 24) - 1, (1 << 40) - 1,
                                                    ((2, (1 << 40) - 1),))
    assert (b.node_reads, b.home_node) == (((1, (1 << 24) - 1),), -1)  # HOME_BUSY: unknown
    cc = got[(0xC, 0)]
    assert (cc.reads, cc.bytes_read, cc.writes, cc.node_reads, cc.home_node) == (
        0, 0, 2, (), -1)
    assert [x.file_id for x in h.chunks] == [0xB, 0xA, 0xC]  # most bytes first
    assert h.clients == 3
    data = path.read_bytes()
    assert struct.unpack_from("<I", data, 16)[0] == 1  # flipped
    assert data[2112:2112 + layout.region_len] == bytes(layout.region_len)  # zeroed
    assert c.harvest(0).chunks == ()
    c.close()


@pytest.mark.parametrize(("cpulists", "granted", "numa"), [
    ({0: "0", 1: "1"}, p.SHIM_CAPS, True),
    ({0: "0", 1: "1"}, (p.CAP_REPLICAS,), True),
    ({0: "0", 1: "1"}, (p.CAP_COLORS,), False),
    ({0: "0", 1: "1"}, (), False),
    ({0: "0-1", 1: ""}, p.SHIM_CAPS, False),  # node 1 has memory only
], ids=["both-caps", "replicas", "colors-only", "old-host", "one-node-with-cpus"])
def test_table_numa_is_set_only_when_the_agent_reports_homes(
        tmp_path: Path, cpulists: dict[int, str], granted: tuple[str, ...],
        numa: bool) -> None:
    root = _sysfs(tmp_path, {0: (1, 2), 1: (1, 2)}, cpulists)
    h = FakeHost(tmp_path, extra_caps=p.SHIM_CAPS, sys_root=str(root))
    assert not h.table.snapshot().flags & shm.TABLE_NUMA  # before any welcome
    h.handshake(granted)
    assert h.agent.reports_homes is numa
    assert bool(h.table.snapshot().flags & shm.TABLE_NUMA) is numa  # the params' table
    h.send({**PLACE, "entries": [["a", 0, [1], True, 0]]})
    assert h.recv()["type"] == "applied"
    snap = h.table.snapshot()
    assert snap.version == PLACE["version"]
    assert bool(snap.flags & shm.TABLE_NUMA) is numa
