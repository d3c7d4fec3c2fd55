"""The shim's counts are exact: what random reads under it add to the counters is what the
counting rule (docs/agent.md "The shim") says, chunk by chunk, though the shim gathers them
in a thread's run and sends them once per chunk (uc_counters.c, uc_in_run).

The rule, in Python: a read of r bytes at `off` adds r bytes, split over the chunks it
spans, and one run to its first chunk unless it continues the thread's previous read of the
file inside that chunk (where that read ended, not at the chunk's start); every further
chunk it spans gets a run. Sequences mix sequential streams (which cross chunks through the
run's fast path), jumps, rereads, short reads at the end of the file and the four kinds of
call, on a placed and an unplaced file.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from pathlib import Path

import pytest
from unicache_agent.shm import BUDGET_UNLIMITED, ShmEntry

from tests.shim.shimtools import CHUNK, Reader, ShimEnv

SIZE = 20 * CHUNK + 12345
KINDS = ("pread", "read", "readv", "preadv")


class Rule:
    """The counting rule, per file: bytes and runs per chunk."""

    def __init__(self) -> None:
        self.bytes: dict[int, int] = defaultdict(int)
        self.runs: dict[int, int] = defaultdict(int)
        self.seq_end = -1

    def read(self, off: int, n: int) -> None:
        r = max(0, min(n, SIZE - off))
        cont = off == self.seq_end
        left, o, first = r, off, True
        while True:
            part = min(CHUNK - o % CHUNK, left)
            self.runs[o // CHUNK] += 0 if first and cont and o % CHUNK else 1
            self.bytes[o // CHUNK] += part
            left -= part
            o += part
            first = False
            if not left:
                break
        if r:
            self.seq_end = off + r


def _ops(seed: int, count: int) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    ops, end = [], 0
    for _ in range(count):
        kind = rng.choice(KINDS)
        n = rng.choice([512, 4096, 4096, 16384, 65536, CHUNK, CHUNK + 1000])
        how = rng.random()
        if how < 0.55:
            off = end  # continue a sequential stream
        elif how < 0.7:
            off = rng.randrange(0, SIZE // CHUNK + 1) * CHUNK  # a chunk's start
        elif how < 0.8:
            off = max(0, SIZE - rng.randrange(1, 3 * 4096))  # near the end: short reads
        else:
            off = rng.randrange(0, SIZE)
        ops.append((kind, off, n))
        end = min(off + n, SIZE)
    return ops


@pytest.mark.parametrize("placed", [False, True], ids=["unplaced", "placed"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counts_are_the_rules_chunk_by_chunk(shim_env: ShimEnv, tmp_path: Path, seed: int,
                                              placed: bool) -> None:
    f = tmp_path / "data"
    data = random.Random(seed).randbytes(SIZE)
    f.write_bytes(data)
    fid = shim_env.file_id(f)
    every = frozenset(os.sched_getaffinity(0))
    entries = [ShmEntry(fid, c, every, caching=True, migration_budget=BUDGET_UNLIMITED)
               for c in range(SIZE // CHUNK + 1)] if placed else [ShmEntry(7, 0, every)]
    shim_env.table.publish(1, CHUNK, 4096, entries)
    shim_env.counters.harvest(0)
    rule = Rule()
    with Reader(shim_env, f) as r:
        for kind, off, n in _ops(seed, 300):
            got, _ = r.call(kind, off, n) if kind != "pread" else (r.pread(off, n), 0)
            assert got == data[off:off + n]
            rule.read(off, n)
    counted: dict[int, tuple[int, int]] = defaultdict(lambda: (0, 0))
    for c in shim_env.counters.harvest(0).chunks:
        if c.file_id == fid:
            b, n = counted[c.chunk]
            counted[c.chunk] = (b + c.bytes_read, n + c.reads)
    expected = {c: (rule.bytes[c], rule.runs[c]) for c in rule.runs}
    assert dict(counted) == expected
