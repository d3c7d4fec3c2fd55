"""Replica coherence: concurrent writers and readers, zero stale bytes in a randomized run.

Readers run under the shim with every chunk of the file replicated on node 0 (this host's
only node), so their reads are served from replicas whenever the shim may. Writers run
with the shim (pwrite; lseek + writev) and without it (plain python: pwrite; lseek + write),
in bursts, so the file is in turn quiet (replicas fill and serve) and written (replicas
must drop at once). The agent's fanotify capture bumps file generations meanwhile, as in a
guest. coherence_worker.py defines the block stamps and the stale check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from unicache_agent.fanotify import FanotifyCapture
from unicache_agent.shm import ShmEntry

from tests.shim.coherence_worker import BLOCK, NBLOCKS, make_block
from tests.shim.shimtools import CHUNK, ShimEnv

WORKER = Path(__file__).resolve().parent / "coherence_worker.py"
DURATION_S = 6.0
SEED = 20261122
#: writer modes and whether each runs under the shim
WRITERS = (("pwrite", True), ("writev", True), ("pwrite", False), ("write", False))


def test_concurrent_writers_and_replica_readers_never_read_stale_bytes(
        shim_env: ShimEnv, tmp_path: Path) -> None:
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

    cap = FanotifyCapture(shim_env.table.salt, str(tmp_path), on_modify=on_modify)
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            cap.poll(4096)
            time.sleep(0.002)

    poller = threading.Thread(target=poll)
    poller.start()
    plain = {k: v for k, v in shim_env.env.items() if k != "LD_PRELOAD"}
    t0 = time.time() + 1.0  # every process starts before the schedule does
    args = [str(f), str(commits), repr(t0), str(DURATION_S), str(SEED)]
    try:
        writers = [subprocess.Popen([sys.executable, str(WORKER), "writer", str(i),
                                     str(len(WRITERS)), mode, *args],
                                    env=shim_env.env if shim else plain)
                   for i, (mode, shim) in enumerate(WRITERS)]
        readers = [subprocess.Popen([sys.executable, str(WORKER), "reader", str(i), str(th),
                                     *args], env=shim_env.env, stdout=subprocess.PIPE,
                                    text=True)
                   for i, th in enumerate((1, 1, 3))]
        results = [json.loads(r.communicate(timeout=DURATION_S + 60)[0]) for r in readers]
        assert [w.wait(timeout=30) for w in writers] == [0] * len(WRITERS)
        assert [r.returncode for r in readers] == [0] * len(readers)
    finally:
        stop.set()
        poller.join()
        cap.close()
    total = {k: sum(r[k] for r in results) for k in results[0]}
    stats = shim_env.counters.stats()
    print(f"coherence: {total} {stats}")
    assert total["stale"] == 0, total
    assert total["garbage"] == 0 and total["torn_bad"] == 0, total
    assert total["reads"] > 2000, total
    # the replica path really ran, and really dropped replicas under writes
    assert stats.replica_serves > 1000, stats
    assert stats.replica_fills >= 5, stats
    assert stats.replica_rejects + stats.fill_aborts > 0, stats
    assert stats.gen_bumps > 0, stats  # writers under the shim bumped the generation
    assert seen, "fanotify saw no write of the plain writers"
    written = sum(int.from_bytes(f.read_bytes()[b * BLOCK:b * BLOCK + 8], "little")
                  for b in range(NBLOCKS))
    assert written > 200, written  # the writers really wrote
