"""The agent's replica store: budget, MQ order, the memory-tight timer, the 2:1 shrink, writes.

Real files (replica files in a temporary directory, not mounted; sources on this host's
ext4), the store called directly as the agent's socket would call it.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.policy.ncc.memory import REPLICA_BUDGET_RATIO, replica_budget, replica_bytes
from unicache_agent.replica_files import DATA_OFF, charge
from unicache_agent.replica_store import DEFAULT_BUDGET_RATIO, MIN_FREE_RATIO, ReplicaStore
from unicache_agent.shm import ChunkCounts, file_id_of

CHUNK = 65536
SALT = 0x1234567
#: a node of this many bytes gets a budget of exactly four full-chunk replicas
NODE = 4 * charge(CHUNK) * 10


@pytest.fixture
def files(tmp_path: Path) -> Iterator[list[tuple[int, int]]]:
    """Eight source files of two chunks, quiet; (descriptor, file id) of each."""
    out = []
    for i in range(8):
        p = tmp_path / f"src{i}"
        p.write_bytes(bytes([i]) * (CHUNK + 100))
    time.sleep(0.05)
    for i in range(8):
        fd = os.open(tmp_path / f"src{i}", os.O_RDONLY)
        st = os.fstat(fd)
        out.append((fd, file_id_of(SALT, st.st_dev, st.st_ino)))
    yield out
    for fd, _ in out:
        os.close(fd)


def _store(tmp_path: Path, files: list[tuple[int, int]], nodes: tuple[int, ...] = (0, 1),
           node_bytes: int = NODE) -> ReplicaStore:
    store = ReplicaStore(str(tmp_path / "rep"), dict.fromkeys(nodes, node_bytes), SALT,
                         mount=False)
    store.set_table(CHUNK, {(fid, c): frozenset(nodes) for _fd, fid in files for c in (0, 1)})
    return store


def _hits(fid: int, chunk: int, node: int, reads: int) -> ChunkCounts:
    return ChunkCounts(fid, chunk, reads * 100, reads, 0, 0, 0, (), 0, ((node, reads),))


def test_the_agent_charges_and_budgets_replicas_as_the_host_and_simulator_do() -> None:
    assert DEFAULT_BUDGET_RATIO == REPLICA_BUDGET_RATIO
    for n in (1, 100, 4095, 4096, 4097, CHUNK, CHUNK + 1):
        assert charge(n) == replica_bytes(n)
    assert replica_budget(NODE) == 4 * charge(CHUNK)


def test_one_copy_per_node_whoever_asks(tmp_path: Path, files: list[tuple[int, int]]) -> None:
    store = _store(tmp_path, files)
    fd, fid = files[0]
    other = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)  # another process's descriptor
    try:
        st1, p1 = store.request(fd, fid, 0, CHUNK, 0)
        st2, p2 = store.request(other, fid, 0, CHUNK, 0)
    finally:
        os.close(other)
    assert (st1, st2) == (0, 0) and p1 == p2 and p1 is not None
    assert os.path.getsize(p1) == DATA_OFF + CHUNK
    assert (os.stat(p1).st_mode & 0o777) == 0o400
    with open(p1, "rb") as f:
        assert f.read()[DATA_OFF:] == bytes([0]) * CHUNK
    st3, p3 = store.request(fd, fid, 0, CHUNK, 1)  # the other node: its own copy
    assert st3 == 0 and p3 != p1 and "node1" in str(p3)
    assert store.stats.fills == 2 and store.stats.hits == 1
    assert [(u.node, u.replicas, u.bytes_held) for u in store.usage()] == [
        (0, 1, charge(CHUNK)), (1, 1, charge(CHUNK))]


def test_refusals_name_why(tmp_path: Path, files: list[tuple[int, int]]) -> None:
    store = _store(tmp_path, files)
    fd, fid = files[0]
    assert store.request(fd, fid, 5, CHUNK, 0) == (errno.ENOENT, None)  # not in the table
    assert store.request(fd, fid, 0, 2 * CHUNK, 0) == (errno.ENOENT, None)  # old chunk size
    assert store.request(fd, fid, 0, CHUNK, 3) == (errno.ENOENT, None)  # no such node
    w = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
    try:
        os.pwrite(w, b"x", 0)
    finally:
        os.close(w)
    assert store.request(fd, fid, 0, CHUNK, 0) == (errno.EAGAIN, None)  # just written
    assert store.stats.refused == {"not-in-table": 3, "too-fresh": 1}


def test_a_full_node_evicts_in_mq_order(tmp_path: Path, files: list[tuple[int, int]]) -> None:
    store = _store(tmp_path, files)
    for fd, fid in files[:4]:
        assert store.request(fd, fid, 0, CHUNK, 0)[0] == 0
    # reads harvested, one round aging them all by one: file 0 often (freq 5, Q_2), file 1
    # (freq 2, Q_1, read in round 1), file 3 (freq 2, Q_1, read in round 2), file 2 not (Q_0)
    store.round([_hits(files[0][1], 0, 0, 5), _hits(files[1][1], 0, 0, 2)], [])
    store.round([_hits(files[3][1], 0, 0, 1)], [])
    assert [r.key.file_id for r in store.mq_order(0)] == [
        files[2][1], files[1][1], files[3][1], files[0][1]]
    fd, fid = files[4]
    assert store.request(fd, fid, 0, CHUNK, 0)[0] == 0  # full: the first victim goes
    assert {k.file_id for k in store.replicas} == {f for _, f in files[:2]} | {
        files[3][1], fid}
    assert store.stats.dropped == {"mq-victim": 1}
    assert store.usage()[0].bytes_held == 4 * charge(CHUNK) <= store.budgets[0]


def test_aging_lowers_frequencies_to_one(tmp_path: Path, files: list[tuple[int, int]]) -> None:
    store = _store(tmp_path, files)
    fd, fid = files[0]
    store.request(fd, fid, 0, CHUNK, 0)
    store.round([_hits(fid, 0, 0, 6)], [])
    (r,) = store.replicas.values()
    assert (r.freq, r.queue) == (7, 2)
    for _ in range(10):
        store.round([], [])
    assert r.freq == 1


def test_memory_tight_nodes_make_no_replicas_and_shrink_two_to_one(
        tmp_path: Path, files: list[tuple[int, int]]) -> None:
    store = _store(tmp_path, files)
    for fd, fid in files[:4]:
        assert store.request(fd, fid, 0, CHUNK, 0)[0] == 0
        assert store.request(fd, fid, 0, CHUNK, 1)[0] == 0
    floor = int(NODE * MIN_FREE_RATIO)
    # node 0 lacks 3 full-chunk replicas' worth of pages: replicas give back 2 of 3
    lacking = 3 * charge(CHUNK)
    store.round([], [(0, floor - lacking, NODE), (1, NODE // 2, NODE)])
    assert store.tight == frozenset({0})
    assert store.usage()[0].replicas == 2 and store.usage()[1].replicas == 4
    assert store.stats.dropped == {"memory-tight": 2}
    fd, fid = files[5]
    assert store.request(fd, fid, 0, CHUNK, 0) == (errno.ENOSPC, None)
    assert store.request(fd, fid, 0, CHUNK, 1)[0] == 0  # node 1 is not tight
    store.round([], [(0, NODE // 2, NODE), (1, NODE // 2, NODE)])  # pressure over
    assert store.request(fd, fid, 0, CHUNK, 0)[0] == 0


def test_writes_and_tables_drop_replicas_and_free_their_memory(
        tmp_path: Path, files: list[tuple[int, int]]) -> None:
    store = _store(tmp_path, files)
    (fd0, f0), (fd1, f1) = files[:2]
    for fd, fid in files[:2]:
        for chunk in (0, 1):
            assert store.request(fd, fid, chunk, CHUNK, 0)[0] == 0
    paths = [r.path for r in store.replicas.values() if r.key.file_id == f0]
    assert store.drop_file(f0) == 2  # fanotify: every replica of the file
    assert not any(os.path.exists(p) for p in paths)
    store.round([ChunkCounts(f1, 1, 0, 0, 3, 0, 0, ())], [])  # the harvest shows writes
    assert not store.replicas
    assert store.request(fd0, f0, 0, CHUNK, 0)[0] == 0
    store.set_table(CHUNK, {(f0, 1): frozenset({0})})  # the host no longer lists chunk 0
    assert not store.replicas and store.usage()[0].bytes_held == 0
    assert store.stats.dropped == {"write": 4, "table": 1}


def test_a_dropped_replica_is_marked_and_truncated_under_its_readers(
        tmp_path: Path, files: list[tuple[int, int]]) -> None:
    store = _store(tmp_path, files)
    fd, fid = files[0]
    _st, path = store.request(fd, fid, 0, CHUNK, 0)
    assert path is not None
    reader = os.open(path, os.O_RDONLY)  # a process's descriptor of it
    try:
        store.drop_file(fid)
        assert os.fstat(reader).st_size == DATA_OFF  # its memory is gone
        assert os.pread(reader, 4, 8) == (2).to_bytes(4, "little")  # DROPPED
    finally:
        os.close(reader)
    assert not os.path.exists(path)


def test_each_node_gets_a_tmpfs_bound_to_it_with_the_budget_as_its_size(
        tmp_path: Path, files: list[tuple[int, int]]) -> None:
    store = ReplicaStore(str(tmp_path / "rep"), {0: NODE}, SALT, mount=True)
    try:
        assert store.mounted == {0: True}
        node0 = os.path.realpath(tmp_path / "rep" / "node0")
        with open("/proc/self/mounts") as f:
            (line,) = [ln for ln in f if ln.split()[1] == node0]
        fstype, opts = line.split()[2], line.split()[3].split(",")
        assert fstype == "tmpfs" and "mpol=bind:0" in opts and "nosuid" in opts
        assert f"size={store.budgets[0] // 1024}k" in opts
        store.set_table(CHUNK, {(files[0][1], 0): frozenset({0})})
        assert store.request(files[0][0], files[0][1], 0, CHUNK, 0)[0] == 0
        st = os.statvfs(node0)
        assert (st.f_blocks - st.f_bfree) * st.f_frsize == charge(CHUNK)
    finally:
        store.close(unmount=True)
    with open("/proc/self/mounts") as f:
        assert node0 not in f.read()
