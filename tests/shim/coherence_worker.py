"""Writer and reader processes of the replica coherence test (test_shim_coherence.py).

The data file is ``NBLOCKS`` blocks of ``BLOCK`` bytes. Every write stamps one whole block:
``[version][block][payload(block, version)][version]``, so a reader can tell the version it
got and whether the block is whole. The commits file holds two arrays of u64 per block,
``writing`` (the version a writer is about to write) and ``committed`` (the version whose
``pwrite`` returned). Each block has one writer, so both only grow.

A reader snapshots ``committed`` for its blocks before its read and ``writing`` after it.
A whole block older than its ``committed`` snapshot is **stale** (the bug this test hunts);
one newer than ``writing`` is garbage; a torn block is legitimate only when a write of that
block overlapped the read (``writing`` after > ``committed`` before).

Writers write only in "write slots" (a shared pseudo-random schedule of 150 ms slots), so
that the file is also quiet for long enough to be replicated (the shim fills a replica only
from a file whose ctime is older than its margin).

Usage::

    coherence_worker.py writer ID NWRITERS MODE FILE COMMITS T0 DURATION SEED
    coherence_worker.py reader ID THREADS KIND FILE COMMITS T0 DURATION SEED

MODE: ``pwrite``, ``writev`` (lseek + writev) or ``write`` (lseek + write). KIND, the call a
reader reads with: ``pread``, ``read`` (lseek + read), ``readv`` (lseek + readv), ``preadv``
or ``sendfile`` (into a pipe, at an offset). A reader prints one JSON line of totals.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import random
import struct
import sys
import threading
import time

BLOCK = 4096
NBLOCKS = 64
SLOT_S = 0.15
#: STALE lines a reader thread prints (it counts them all)
MAX_STALE_LINES = 10
_U64 = struct.Struct("<Q")


def payload(block: int, version: int) -> bytes:
    """The bytes between the two version stamps of a block."""
    d = hashlib.blake2b(f"{block}:{version}".encode(), digest_size=64).digest()
    return (d * (BLOCK // 64))[:BLOCK - 24]


def make_block(block: int, version: int) -> bytes:
    """One whole block at a version."""
    v = _U64.pack(version)
    return v + _U64.pack(block) + payload(block, version) + v


def write_slot(t0: float, seed: int) -> bool:
    """Whether writers write now (half of the slots, the same for every process)."""
    slot = int((time.time() - t0) / SLOT_S)
    return random.Random(seed * 1_000_003 + slot).random() < 0.5


class Commits:
    """The shared ``writing`` and ``committed`` arrays.

    Accessed through a ``Q`` memoryview: one 8-byte load or store per value. ``struct``'s
    ``pack_into`` writes a little-endian u64 byte by byte, so a reader could see a torn
    value (255 -> 256 passes through 0) and count a false "garbage" or miss a stale block.
    """

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR)
        self.map = mmap.mmap(fd, 16 * NBLOCKS)
        os.close(fd)
        self.words = memoryview(self.map).cast("Q")

    def writing(self, b: int) -> int:
        return int(self.words[b])

    def committed(self, b: int) -> int:
        return int(self.words[NBLOCKS + b])

    def set_writing(self, b: int, v: int) -> None:
        self.words[b] = v

    def set_committed(self, b: int, v: int) -> None:
        self.words[NBLOCKS + b] = v


def writer(wid: int, nwriters: int, mode: str, path: str, commits: Commits, t0: float,
           duration: float, seed: int) -> None:
    rng = random.Random(seed * 31 + wid)
    mine = [b for b in range(NBLOCKS) if b % nwriters == wid]
    fd = os.open(path, os.O_WRONLY)
    os.fstat(fd)  # as programs do: the shim learns the file from it
    end = t0 + duration
    while time.time() < end:
        if not write_slot(t0, seed):
            time.sleep(0.005)
            continue
        b = rng.choice(mine)
        v = commits.committed(b) + 1
        data = make_block(b, v)
        commits.set_writing(b, v)
        if mode == "pwrite":
            os.pwrite(fd, data, b * BLOCK)
        elif mode == "writev":
            os.lseek(fd, b * BLOCK, os.SEEK_SET)
            os.writev(fd, [data[:1000], data[1000:]])
        else:
            os.lseek(fd, b * BLOCK, os.SEEK_SET)
            os.write(fd, data)
        commits.set_committed(b, v)
        time.sleep(rng.random() * 0.002)
    os.close(fd)


def read_blocks(kind: str, fd: int, n: int, off: int, pipe: tuple[int, int]) -> bytes:
    """n bytes at off through the call ``kind`` (see the module's usage)."""
    if kind == "pread":
        return os.pread(fd, n, off)
    if kind == "sendfile":
        sent = os.sendfile(pipe[1], fd, off, n)
        return os.read(pipe[0], sent) if sent > 0 else b""
    bufs = [bytearray(n // 2), bytearray(n - n // 2)]
    if kind == "preadv":
        got = os.preadv(fd, bufs, off)
    else:
        os.lseek(fd, off, os.SEEK_SET)
        if kind == "read":
            return os.read(fd, n)
        got = os.readv(fd, bufs)
    return b"".join(bufs)[:got]


def reader(threads: int, kind: str, path: str, commits: Commits, t0: float, duration: float,
           seed: int) -> dict[str, int]:
    totals = {"reads": 0, "blocks": 0, "stale": 0, "garbage": 0, "torn_ok": 0, "torn_bad": 0}
    lock = threading.Lock()
    end = t0 + duration

    def run(tid: int) -> None:
        rng = random.Random(seed * 97 + tid)
        fd = os.open(path, os.O_RDONLY)
        os.fstat(fd)  # as programs do: the shim learns the file from it
        pipe = os.pipe()
        if kind == "sendfile":  # room for the largest read: a send never blocks
            import fcntl
            fcntl.fcntl(pipe[1], 1031, 16 * BLOCK * 2)  # F_SETPIPE_SZ
        mine = dict.fromkeys(totals, 0)
        while time.time() < end:
            # mostly inside one 64 KiB chunk (replica serves), sometimes across two
            n = rng.randint(1, 16)
            b0 = rng.randrange(0, NBLOCKS - n + 1)
            blocks = range(b0, b0 + n)
            before = [commits.committed(b) for b in blocks]
            data = read_blocks(kind, fd, n * BLOCK, b0 * BLOCK, pipe)
            after = [commits.writing(b) for b in blocks]
            mine["reads"] += 1
            for i, b in enumerate(blocks):
                blk = data[i * BLOCK:(i + 1) * BLOCK]
                mine["blocks"] += 1
                head, idx = _U64.unpack_from(blk, 0)[0], _U64.unpack_from(blk, 8)[0]
                tail = _U64.unpack_from(blk, BLOCK - 8)[0]
                whole = head == tail and idx == b and blk[16:BLOCK - 8] == payload(b, head)
                if whole and head < before[i]:
                    mine["stale"] += 1
                    if mine["stale"] <= MAX_STALE_LINES:
                        print(f"STALE block={b} got={head} committed_before={before[i]}",
                              file=sys.stderr)
                elif whole and head > after[i]:
                    mine["garbage"] += 1
                elif not whole:
                    mine["torn_ok" if after[i] > before[i] else "torn_bad"] += 1
        os.close(fd)
        os.close(pipe[0])
        os.close(pipe[1])
        with lock:
            for k, v in mine.items():
                totals[k] += v

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return totals


def main(argv: list[str]) -> int:
    """Run one writer or reader."""
    if argv[0] == "writer":
        wid, nw, mode, path, cpath, t0, dur, seed = argv[1:9]
        writer(int(wid), int(nw), mode, path, Commits(cpath), float(t0), float(dur),
               int(seed))
        return 0
    _rid, threads, kind, path, cpath, t0, dur, seed = argv[1:9]
    print(json.dumps(reader(int(threads), kind, path, Commits(cpath), float(t0), float(dur),
                            int(seed))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
