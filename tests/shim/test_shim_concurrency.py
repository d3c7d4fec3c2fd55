"""Threads reading through the shim while the agent republishes and harvests: same bytes."""

from __future__ import annotations

import random
import struct
import subprocess
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


def test_a_counters_header_rewritten_under_the_readers_changes_nothing(
    shim_env: ShimEnv, tmp_path: Path
) -> None:
    # issue #12: another process of this user (only this user may write the file) rewrites
    # its header with sizes that would take the shim outside its mapping. The shim sized
    # everything from the copy it validated when it mapped the file: no fault, same bytes
    f = tmp_path / "data"
    f.write_bytes(random.Random(11).randbytes(2 * 1024 * 1024 + 7))
    fid = shim_env.file_id(f)
    avail = cpus()
    shim_env.table.publish(1, CHUNK, 0, [
        ShmEntry(fid, i, frozenset(avail), caching=True, migration_budget=0xFFFFFFFF)
        for i in range(f.stat().st_size // CHUNK + 1)
    ])
    counters = shim_env.user_counters()
    with open(counters, "r+b") as ctr:
        honest = ctr.read(64)
    stop = threading.Event()
    rewrites = [0]

    def vandal() -> None:
        # nslots = 2**30, max_vcpus = 4096 (at 8 and 12); slot_size = 64 (at 20);
        # reserved = 1000 (at 48: the shim must refuse a header with it set)
        with open(counters, "r+b") as ctr:
            while not stop.is_set():
                ctr.seek(8)
                ctr.write(struct.pack("<II", 1 << 30, 4096))
                ctr.seek(20)
                ctr.write(struct.pack("<I", 64))
                ctr.seek(48)
                ctr.write(struct.pack("<I", 1000))
                ctr.flush()
                rewrites[0] += 1

    clients = struct.unpack_from("<Q", honest, 40)[0]
    proc = subprocess.Popen([str(shim_env.selftest), "threads", "13", "12000", str(f)],
                            env=shim_env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    t = threading.Thread(target=vandal)
    try:
        # the header is rewritten only once the reader has mapped it (its clients count)
        while proc.poll() is None:
            with open(counters, "rb") as ctr:
                if struct.unpack_from("<Q", ctr.read(64), 40)[0] > clients:
                    break
        t.start()
        out, err = proc.communicate(timeout=120)
    finally:
        stop.set()
        if t.is_alive():
            t.join()
        with open(counters, "r+b") as ctr:  # for the fixture's teardown
            ctr.write(honest)
    assert proc.returncode == 0, out + err[-2000:]
    assert "mismatches=0" in out
    assert rewrites[0] > 10, rewrites
