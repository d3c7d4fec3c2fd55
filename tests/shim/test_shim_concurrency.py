"""Threads reading through the shim while the agent republishes and harvests: same bytes."""

from __future__ import annotations

import random
import threading
from pathlib import Path

from unicache_agent.shm import ShmEntry

from tests.shim.shimtools import CHUNK, ShimEnv, cpus


def test_reads_identical_while_tables_flip_and_counters_harvest(shim_env: ShimEnv,
                                                                 tmp_path: Path) -> None:
    f = tmp_path / "data"
    f.write_bytes(random.Random(9).randbytes(3 * 1024 * 1024 + 123))
    fid = shim_env.file_id(f)
    avail = cpus()
    stop = threading.Event()
    published = [0]

    def churn() -> None:
        rng = random.Random(10)
        while not stop.is_set():
            entries = [ShmEntry(fid, i, frozenset(rng.sample(avail, rng.randint(1, len(avail)))),
                                caching=rng.random() < 0.5,
                                migration_budget=rng.choice([0, 2, 0xFFFFFFFF]))
                       for i in range(f.stat().st_size // CHUNK + 1) if rng.random() < 0.7]
            published[0] += 1
            shim_env.table.publish(published[0], CHUNK, rng.choice([0, 4096, 1 << 20]), entries)
            if published[0] % 5 == 0:
                shim_env.counters.harvest(0.001)

    t = threading.Thread(target=churn)
    t.start()
    try:
        res = shim_env.run("threads", "21", "4000", str(f))
    finally:
        stop.set()
        t.join()
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    assert "mismatches=0" in res.stdout
    assert published[0] > 20, published  # the table really changed under the readers
