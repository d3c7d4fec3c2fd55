"""Replica coherence: concurrent writers and readers, zero stale bytes in a randomized run.

Five reader processes run under the shim, each reading with another call (pread, read,
readv, preadv, sendfile), with every chunk of the file replicated on node 0 (this host's
only node): their reads are served from the agent's replicas, one copy per chunk that all
of them share, whenever the shim may. Writers run with the shim (pwrite; lseek + writev)
and without it (plain python: pwrite; lseek + write), in bursts, so the file is in turn
quiet (replicas fill and serve) and written (replicas must drop at once). The agent's
fanotify capture bumps file generations and drops the file's replicas meanwhile, as in a
guest. coherence_worker.py defines the block stamps and the stale check.

The same run against a shim built with ``-DUC_MUTANT_NO_SERVE_CHECK`` (uc_replicas.c: a
replica is served without the check that the file is unchanged since its fill,
docs/replicas.md "Coherence" step 1) must fail the check, at the stale blocks: so the run
can catch the bug it hunts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from unicache_agent.fanotify import FanotifyCapture
from unicache_agent.shm import ShimStats, ShmEntry

from tests.shim.coherence_worker import BLOCK, NBLOCKS, make_block
from tests.shim.shimtools import CHUNK, SHIM_DIR, ShimEnv, build_mutant

WORKER = Path(__file__).resolve().parent / "coherence_worker.py"
DURATION_S = 6.0
SEED = 20261122
#: writer modes and whether each runs under the shim
WRITERS = (("pwrite", True), ("writev", True), ("pwrite", False), ("write", False))
#: reader processes: threads and the call each reads with (every kind the shim serves)
READERS = ((3, "pread"), (1, "read"), (1, "readv"), (1, "preadv"), (1, "sendfile"))
#: the define of the mutant shim (uc_replicas.c) this test must catch
MUTANT = "-DUC_MUTANT_NO_SERVE_CHECK"


@dataclass(frozen=True)
class CoherenceRun:
    """What one run saw: the readers' totals, the shim's statistics, the writes."""

    #: the readers' totals: reads, blocks, stale, garbage, torn_bad, ...
    total: dict[str, int]
    stats: ShimStats
    #: fanotify saw a write of the plain writers
    seen_plain_writes: bool
    #: the versions written, summed over the blocks
    written: int
    #: replicas the agent filled (each shared by every reader process)
    agent_fills: int


def run_coherence(shim_env: ShimEnv, tmp_path: Path, shim: Path) -> CoherenceRun:
    """Runs the writers and readers once, the processes under the shim preloading `shim`.

    :param shim: the libunicache.so to preload (the real one, or a mutant)
    :returns: the run's totals and statistics; nothing is checked here
    """
    env = {**shim_env.env, "LD_PRELOAD": str(shim)}
    f = tmp_path / "data"
    f.write_bytes(b"".join(make_block(b, 0) for b in range(NBLOCKS)))
    commits = tmp_path / "commits"
    commits.write_bytes(bytes(16 * NBLOCKS))
    fid = shim_env.file_id(f)
    shim_env.table.publish(1, CHUNK, 4096, [
        ShmEntry(fid, i, frozenset(), replica_nodes=frozenset({0}))
        for i in range(NBLOCKS * BLOCK // CHUNK)])
    # the agent's part for writers without the shim: FAN_MODIFY bumps the generation
    seen: list[int] = []

    def on_modify(file_id: int) -> None:
        if file_id == fid:
            seen.append(file_id)
        shim_env.counters.bump_generation(file_id)
        with shim_env.replicas.lock:
            shim_env.replicas.store.drop_file(file_id)

    cap = FanotifyCapture(shim_env.table.salt, str(tmp_path), on_modify=on_modify)
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            cap.poll(4096)
            time.sleep(0.002)

    poller = threading.Thread(target=poll)
    poller.start()
    plain = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    t0 = time.time() + 1.0  # every process starts before the schedule does
    args = [str(f), str(commits), repr(t0), str(DURATION_S), str(SEED)]
    try:
        writers = [subprocess.Popen([sys.executable, str(WORKER), "writer", str(i),
                                     str(len(WRITERS)), mode, *args],
                                    env=env if under_shim else plain)
                   for i, (mode, under_shim) in enumerate(WRITERS)]
        readers = [subprocess.Popen([sys.executable, str(WORKER), "reader", str(i), str(th),
                                     kind, *args], env=env, stdout=subprocess.PIPE,
                                    text=True)
                   for i, (th, kind) in enumerate(READERS)]
        results = [json.loads(r.communicate(timeout=DURATION_S + 60)[0]) for r in readers]
        assert [w.wait(timeout=30) for w in writers] == [0] * len(WRITERS)
        assert [r.returncode for r in readers] == [0] * len(readers)
    finally:
        stop.set()
        poller.join()
        cap.close()
    total = {k: sum(r[k] for r in results) for k in results[0]}
    stats = shim_env.counters.stats()
    print(f"coherence ({shim}): {total} {stats} agent fills "
          f"{shim_env.replicas.store.stats.fills}")
    written = sum(int.from_bytes(f.read_bytes()[b * BLOCK:b * BLOCK + 8], "little")
                  for b in range(NBLOCKS))
    with shim_env.replicas.lock:
        agent_fills = shim_env.replicas.store.stats.fills
    return CoherenceRun(total, stats, bool(seen), written, agent_fills)


def check_coherent(run: CoherenceRun) -> None:
    """The test's check: no stale block, and the run really exercised the replica path.

    :raises AssertionError: the first check that fails; "stale blocks read" first of all
    """
    total, stats = run.total, run.stats
    assert total["stale"] == 0, f"stale blocks read: {total}"
    assert total["garbage"] == 0 and total["torn_bad"] == 0, total
    assert total["reads"] > 2000, total
    # the replica path really ran, and really dropped replicas under writes
    assert stats.replica_serves > 1000, stats
    assert stats.replica_fills >= 5, stats
    assert stats.replica_rejects + stats.fill_aborts > 0, stats
    assert stats.gen_bumps > 0, stats  # writers under the shim bumped the generation
    assert run.seen_plain_writes, "fanotify saw no write of the plain writers"
    assert run.written > 200, run.written  # the writers really wrote
    # shared: the processes mapped the agent's copies more often than the agent made one
    assert 0 < run.agent_fills < stats.replica_fills, (run.agent_fills, stats)


def test_concurrent_writers_and_replica_readers_never_read_stale_bytes(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    check_coherent(run_coherence(shim_env, tmp_path, SHIM_DIR / "libunicache.so"))


def test_the_run_catches_a_shim_that_serves_replicas_without_the_serve_check(
        shim_env: ShimEnv, tmp_path: Path) -> None:
    mutant = build_mutant(tmp_path, MUTANT)
    data = tmp_path / "run"
    data.mkdir()
    run = run_coherence(shim_env, data, mutant)
    # the mutant served from replicas the writers had changed, and the check says so
    assert run.total["stale"] > 0, run.total
    with pytest.raises(AssertionError, match="stale blocks read"):
        check_coherent(run)
