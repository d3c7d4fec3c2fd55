"""NCC replicas and SRM-buffer colors in the shim: served, invalidated, never stale.

This host has one NUMA node (0): a table entry with ``replica_nodes={0}`` makes every reader
here read a replica, which exercises the whole replica path (fill, serve, invalidation).
Colors on node 0 exercise the memory-policy path; the placement on another node is checked
in a real two-node guest (tests/agent/test_agent_numa_qemu.py).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest
from unicache_agent.shm import BUDGET_UNLIMITED, CpuNodes, ShmEntry

from tests.shim.shimtools import CHUNK, Reader, ShimEnv, make_files

#: longer than the shim's default replica margin (20 ms): a file this quiet may be replicated
QUIET_S = 0.06


def _replicated(env: ShimEnv, f: Path, nodes: frozenset[int] = frozenset({0}),
                color: int = -1, vcpus: frozenset[int] = frozenset(), numa: bool = False) -> int:
    fid = env.file_id(f)
    env.table.publish(1, CHUNK, 4096, [
        ShmEntry(fid, i, vcpus, migration_budget=BUDGET_UNLIMITED, color_node=color,
                 replica_nodes=nodes) for i in range(f.stat().st_size // CHUNK + 1)], numa=numa)
    return fid


def _data(tmp_path: Path, size: int = 3 * CHUNK + 100, seed: int = 1) -> tuple[Path, bytes]:
    f = tmp_path / "data"
    data = random.Random(seed).randbytes(size)
    f.write_bytes(data)
    time.sleep(QUIET_S)
    return f, data


def test_replica_is_served_and_a_write_through_the_shim_invalidates_at_once(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    f, data = _data(tmp_path)
    fid = _replicated(shim_env, f)
    with Reader(shim_env, f) as r:
        assert r.pread(100, 5000) == data[100:5100]
        assert r.pread(CHUNK - 10, 10) == data[CHUNK - 10:CHUNK]
        s1 = shim_env.counters.stats()
        assert (s1.replica_fills, s1.replica_serves) == (1, 2)
        gen = shim_env.counters.generation(fid)
        r.pwrite(200, b"X" * 300)  # the shim sees it: the generation moves before and after
        assert shim_env.counters.generation(fid) == gen + 2
        want = data[:200] + b"X" * 300 + data[500:]
        assert r.pread(100, 5000) == want[100:5100]  # at once, no waiting
        s2 = shim_env.counters.stats()
        assert s2.replica_serves == s1.replica_serves  # the stale replica was not served
        assert s2.replica_rejects == 1
        time.sleep(QUIET_S)
        assert r.pread(0, CHUNK) == want[:CHUNK]  # quiet again: a new replica, served
        assert shim_env.counters.stats().replica_fills == 2, shim_env.replicas.store.stats


def test_a_write_without_the_shim_is_never_served_stale(shim_env: ShimEnv,
                                                        tmp_path: Path) -> None:
    f, data = _data(tmp_path)
    _replicated(shim_env, f)
    with Reader(shim_env, f) as r:
        assert r.pread(CHUNK, 4096) == data[CHUNK:CHUNK + 4096]
        serves = shim_env.counters.stats().replica_serves
        fd = os.open(f, os.O_WRONLY)  # this process has no shim: no generation bump
        try:
            os.pwrite(fd, b"new!", CHUNK + 10)
        finally:
            os.close(fd)
        assert r.pread(CHUNK, 4096) == data[CHUNK:CHUNK + 10] + b"new!" + data[
            CHUNK + 14:CHUNK + 4096]
        assert shim_env.counters.stats().replica_serves == serves
        os.truncate(f, CHUNK + 5)  # shrinking: the replica's size no longer matches
        assert r.pread(CHUNK, 4096) == data[CHUNK:CHUNK + 5]
        assert r.pread(CHUNK + 5, 10) == b""


def test_no_replica_from_a_file_changed_within_the_margin(shim_env: ShimEnv,
                                                          tmp_path: Path) -> None:
    f = tmp_path / "data"
    f.write_bytes(b"a" * CHUNK)
    _replicated(shim_env, f)
    with Reader(shim_env, f, {"UNICACHE_REPLICA_MARGIN_MS": "1000"}) as r:
        assert r.pread(0, 100) == b"a" * 100  # ctime is fresh: the real call
        st = shim_env.counters.stats()
        assert st.replica_serves == 0 and st.fill_aborts >= 1
        time.sleep(1.05)
        assert r.pread(0, 100) == b"a" * 100
        assert shim_env.counters.stats().replica_serves == 1


def test_read_spanning_two_chunks_and_other_nodes_take_the_real_call(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    f, data = _data(tmp_path)
    _replicated(shim_env, f)
    with Reader(shim_env, f) as r:
        assert r.pread(CHUNK - 100, 200) == data[CHUNK - 100:CHUNK + 100]
        assert r.pread(len(data) - 50, 4096) == data[-50:]  # the last chunk, short at EOF
        assert r.pread(len(data), 10) == b""
    assert shim_env.counters.stats().replica_serves == 1
    _replicated(shim_env, f, nodes=frozenset({1}))  # a node no CPU of this host is on
    with Reader(shim_env, f) as r:
        assert r.pread(0, 100) == data[:100]
    assert shim_env.counters.stats().replica_serves == 1


def test_color_and_replica_only_entry_never_migrates(shim_env: ShimEnv, tmp_path: Path) -> None:
    f, _ = _data(tmp_path)
    _replicated(shim_env, f, color=0)  # no home vCPUs at all
    res = shim_env.run("migrate", str(f), "32768", "0")
    assert res.returncode == 0, res.stderr
    fields = dict(kv.split("=") for kv in res.stdout.split())
    assert (fields["cpu"], fields["mask"]) == ("0", "0")


def test_colored_reads_run_under_the_node_policy_and_count_home_and_node_reads(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    # a two-node guest where the agent reports homes (UC_TABLE_NUMA): this host's CPUs on
    # node 0, node 1 memory only
    shim_env.relayout(cpu_nodes=CpuNodes.of({c: 0 for c in os.sched_getaffinity(0)}, {0, 1}),
                      nslots=4096)
    f, data = _data(tmp_path)
    fid = _replicated(shim_env, f, nodes=frozenset(), color=0, numa=True)
    out = subprocess.run(["cat", str(f)], env=shim_env.env, capture_output=True, check=True)
    assert out.stdout == data
    assert shim_env.counters.stats().color_reads >= 2  # cat reads 128 KiB at a time
    chunks = [c for c in shim_env.counters.harvest(0).chunks if c.file_id == fid]
    assert len(chunks) == 4
    for c in chunks:
        assert c.home_node == 0  # this host's only node holds the page cache
        assert c.node_reads == ((0, c.reads),)


@pytest.mark.parametrize("seed", [8, 9, 10], ids=["seed8", "seed9", "seed10"])
def test_replica_and_color_reads_identical_to_the_syscalls(shim_env: ShimEnv, tmp_path: Path,
                                                           seed: int) -> None:
    # every call: read, pread, readv, preadv(2), sendfile into a pipe (uc_selftest check)
    files = make_files(tmp_path, seed)
    entries = [ShmEntry(shim_env.file_id(p), i, frozenset(), color_node=0,
                        replica_nodes=frozenset({0}))
               for p in files for i in range(p.stat().st_size // CHUNK + 1)]
    shim_env.table.publish(1, CHUNK, 4096, entries)
    time.sleep(QUIET_S)
    res = shim_env.run("check", str(seed), "3000", *map(str, files))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "mismatches=0" in res.stdout
    st = shim_env.counters.stats()
    assert st.replica_serves > 100, st
    assert st.color_reads > 0, st


def test_a_new_chunk_size_never_serves_a_replica_of_the_old_one(shim_env: ShimEnv,
                                                                 tmp_path: Path) -> None:
    f, data = _data(tmp_path, 6 * CHUNK)
    fid = _replicated(shim_env, f)
    with Reader(shim_env, f) as r:
        assert r.pread(CHUNK + 10, 100) == data[CHUNK + 10:CHUNK + 110]  # chunk 1: 64-128 KiB
        shim_env.table.publish(2, 2 * CHUNK, 4096, [
            ShmEntry(fid, i, frozenset(), replica_nodes=frozenset({0})) for i in range(3)])
        # chunk 1 is now 128-256 KiB: the same index, other bytes
        assert r.pread(2 * CHUNK + 10, 100) == data[2 * CHUNK + 10:2 * CHUNK + 110]
        assert r.pread(3 * CHUNK + 10, 100) == data[3 * CHUNK + 10:3 * CHUNK + 110]
    assert shim_env.counters.stats().replica_fills == 2, shim_env.replicas.store.stats


def _replica_files(env: ShimEnv, node: int = 0) -> list[Path]:
    return sorted((env.replicas.root / f"node{node}").iterdir())


def test_vectored_reads_of_a_replicated_chunk_are_the_kernels_and_counted(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    # the shim never reads a caller's iovec array before the call (a bad one is the
    # kernel's EFAULT): it cannot serve vectored reads, which read the primary copy
    f, data = _data(tmp_path)
    fid = _replicated(shim_env, f)
    shim_env.counters.harvest(0)
    with Reader(shim_env, f) as r:
        assert r.call("readv", CHUNK + 7, 3000) == (data[CHUNK + 7:CHUNK + 3007], CHUNK + 3007)
        assert r.call("preadv", 2 * CHUNK - 5, 100) == (data[2 * CHUNK - 5:2 * CHUNK + 95], 0)
    assert shim_env.counters.stats().replica_serves == 0
    counted = {c.chunk: c.bytes_read for c in shim_env.counters.harvest(0).chunks
               if c.file_id == fid}
    assert counted[1] >= 3000 and counted[2] >= 95


@pytest.mark.parametrize("kind", ["read", "sendfile"])
def test_every_read_call_is_served_from_the_one_replica_two_processes_share(
        shim_env: ShimEnv, tmp_path: Path, kind: str) -> None:
    f, data = _data(tmp_path)
    _replicated(shim_env, f)
    def pos(end: int) -> int:
        return end

    with Reader(shim_env, f) as a, Reader(shim_env, f) as b:
        for r in (a, b):
            before = shim_env.counters.stats().replica_serves
            # inside chunk 1, across chunks 1 and 2 (the real call), short at EOF
            assert r.call(kind, CHUNK + 7, 3000) == (data[CHUNK + 7:CHUNK + 3007],
                                                     pos(CHUNK + 3007))
            assert r.call(kind, 2 * CHUNK - 5, 100) == (data[2 * CHUNK - 5:2 * CHUNK + 95],
                                                        pos(2 * CHUNK + 95))
            assert r.call(kind, len(data) - 9, 100) == (data[-9:], pos(len(data)))
            assert shim_env.counters.stats().replica_serves == before + 2
    # one copy of each chunk on the node, filled once, mapped by both processes
    with shim_env.replicas.lock:
        usage = shim_env.replicas.store.usage()
        assert shim_env.replicas.store.stats.fills == 2  # chunks 1 and 3
    assert [(u.node, u.replicas) for u in usage] == [(0, 2)]
    assert len(_replica_files(shim_env)) == 2
    assert shim_env.counters.stats().replica_fills == 4  # 2 chunks x 2 processes' mappings


def test_a_truncated_or_corrupted_replica_falls_back_to_the_real_call(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    f, data = _data(tmp_path)
    _replicated(shim_env, f)
    with Reader(shim_env, f) as r:
        assert r.pread(10, 100) == data[10:110]
        (rep,) = _replica_files(shim_env)
        os.truncate(rep, 0)  # under the reader's mapping: the copy faults (SIGBUS)
        for kind in ("read", "readv", "sendfile"):
            assert r.call(kind, 20, 100) == (data[20:120], 120)
        assert r.call("preadv", 20, 100) == (data[20:120], 0)
        assert r.pread(30, 100) == data[30:130]
        assert r.proc.poll() is None  # alive
        # the shim let its mapping go and asked again; the agent found its file truncated,
        # dropped it and filled a new one, which served
        (new,) = _replica_files(shim_env)
        assert new != rep
        with shim_env.replicas.lock:
            assert shim_env.replicas.store.stats.dropped == {"corrupt": 1}
        serves = shim_env.counters.stats().replica_serves
        with open(new, "r+b") as w:  # a corrupted state word, garbage
            w.seek(8)
            w.write(b"\xff\xff\xff\xff")
        assert r.pread(50, 100) == data[50:150]  # not served: its mapping goes
        assert r.pread(60, 100) == data[60:160]  # asked again: the agent refills
        assert r.proc.poll() is None
        with shim_env.replicas.lock:
            assert shim_env.replicas.store.stats.dropped == {"corrupt": 2}
        assert shim_env.counters.stats().replica_serves == serves + 1  # from a third file
        assert _replica_files(shim_env) != [new]


def test_a_process_never_waits_for_the_agent_and_takes_its_answer_later(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    f, data = _data(tmp_path)
    _replicated(shim_env, f)
    # the agent is busy: it answers nothing meanwhile
    with shim_env.replicas.lock, Reader(shim_env, f, {"UNICACHE_REPLICA_WAIT_MS": "0"}) as r:
        t0 = time.monotonic()
        assert r.pread(10, 100) == data[10:110]  # asked, not waited for: the real call
        assert time.monotonic() - t0 < 2.0
        assert r.pread(20, 100) == data[20:120]  # still unanswered: the real call
        st = shim_env.counters.stats()
        # one request; both reads made for real while its answer was awaited
        assert (st.replica_serves, st.replica_asks, st.replica_waits) == (0, 1, 2), st
        shim_env.replicas.lock.release()
        try:
            deadline = time.monotonic() + 30
            while (shim_env.counters.stats().replica_serves == 0
                   and time.monotonic() < deadline):
                assert r.pread(30, 100) == data[30:130]  # collects the answer, served
                time.sleep(0.05)
        finally:
            shim_env.replicas.lock.acquire()
    st = shim_env.counters.stats()
    assert st.replica_serves >= 1 and st.replica_fills == 1 and st.replica_asks == 1, st


def test_without_an_agent_every_read_is_the_real_call(shim_env: ShimEnv,
                                                      tmp_path: Path) -> None:
    f, data = _data(tmp_path)
    _replicated(shim_env, f)
    extra = {"UNICACHE_REPLICAS": str(tmp_path / "no-agent-here")}
    with Reader(shim_env, f, extra) as r:
        for kind in ("read", "readv", "sendfile"):
            assert r.call(kind, 5, 1000) == (data[5:1005], 1005)
        assert r.pread(0, 100) == data[:100]
    assert shim_env.counters.stats().replica_serves == 0
