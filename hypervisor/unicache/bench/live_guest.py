"""The guest side of ``unicache bench live``: a busy reader, the agent's CPU, table reaction.

This file is a program for the guest's ``python3`` (Debian 12: Python 3.11, standard
library plus the image's agent package for the table's layout): the host reads it as text
and runs it with ``python3 -c PROGRAM JSON`` through the guest's command runner
(:mod:`live_bench`); nothing on the host imports it. The JSON argument is one object
with ``mode``:

* ``prepare``: write ``files`` files of ``file_bytes`` random bytes under ``dir``
  (``hot-0`` ...) and read each once (page-cached before anything is measured);
* ``steady``: a reader under the shim (``LD_PRELOAD`` = ``shim``) reads the first
  ``busy_files`` files in turn, ``pread`` of ``file_bytes`` at 0, for ``seconds``; print the
  agent's CPU time over the window (``/proc/<agent pid>/stat`` utime + stime, read here,
  in the guest) and the window's length;
* ``trials``: one reader under the shim, told by this program (not under the shim) which
  file to read through a pipe; for each of the files ``first_trial`` .. ``files - 1`` in
  turn, after a random pause of up to ``jitter_s`` (seeded by ``seed``): the reader
  starts reading it (a file the daemon has never seen read) and prints
  the time of its first read; this program polls the guest's shared table (read-only
  map of the agent's table file, the shim's own lookup: hash bucket, linear probe) every
  ``poll_s`` until it holds an entry for the file's chunk 0, or ``timeout_s`` passes;
  print per trial the file's id as the shim and the decision log name it (hex, under the
  salt of the guest's table, which the agent makes once the daemon greets it), the time
  of the first read and the time the entry was seen.

All times are ``CLOCK_BOOTTIME`` of the guest, the clock the guest's command runner
answers a ping with (``/proc/uptime``), so the host can place them on its own clock
(:mod:`live_bench`, "clocks").
"""

import json
import mmap
import os
import random
import select
import subprocess
import sys
import time
from typing import Any

from unicache_agent import shm

#: the reader under the shim: reads ``argv[2:]`` in turn for ``argv[1]`` seconds, or (no
#: files) the file named by each line on its stdin, printing the time of its first read
READER = r"""
import os, select, sys, time
size = int(sys.argv[1]); seconds = float(sys.argv[2]); paths = sys.argv[3:]
now = lambda: time.clock_gettime(time.CLOCK_BOOTTIME)
if paths:
    fds = [os.open(p, os.O_RDONLY) for p in paths]
    for fd in fds:
        os.fstat(fd)  # as programs do: the shim learns the file from it (docs/agent.md)
    end = now() + seconds
    n = 0
    while now() < end:
        for fd in fds:
            os.pread(fd, size, 0)
        n += len(fds)
    print(n)
    sys.exit(0)
fd = None
pending = b""
while True:
    ready, _, _ = select.select([0], [], [], 0 if fd is not None else 1.0)
    if ready:
        data = os.read(0, 4096)
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if fd is not None:
                os.close(fd)
            fd = os.open(line.decode(), os.O_RDONLY)
            os.fstat(fd)  # as programs do: the shim learns the file from it
            start = now()
            os.pread(fd, size, 0)
            print(repr(start), flush=True)
    if fd is not None:
        os.pread(fd, size, 0)
"""


def now() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def file_path(cfg: dict[str, Any], i: int) -> str:
    return os.path.join(cfg["dir"], f"hot-{i}")


def table_salt() -> int:
    with open(shm.DEFAULT_TABLE, "rb") as f:
        return int(shm._HDR.unpack_from(f.read(shm._HDR.size), 0)[2])


def file_id(salt: int, path: str) -> int:
    st = os.stat(path)
    return int(shm.file_id_of(salt, st.st_dev, st.st_ino))


def prepare(cfg: dict[str, Any]) -> dict[str, Any]:
    os.makedirs(cfg["dir"], exist_ok=True)
    for i in range(cfg["files"]):
        path = file_path(cfg, i)
        with open(path, "wb") as f:
            f.write(os.urandom(cfg["file_bytes"]))
        with open(path, "rb") as f:
            f.read()
    return {"files": cfg["files"]}


def agent_pid() -> int | None:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"unicache_agent" in argv:
            return int(name)
    return None


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steady(cfg: dict[str, Any]) -> dict[str, Any]:
    pid = agent_pid()
    paths = [file_path(cfg, i) for i in range(cfg["busy_files"])]
    t0, cpu0 = now(), (cpu_seconds(pid) if pid else 0.0)
    out = subprocess.run(
        ["python3", "-c", READER, str(cfg["file_bytes"]), str(cfg["seconds"]), *paths],
        env=dict(os.environ, LD_PRELOAD=cfg["shim"]), capture_output=True, text=True,
        check=True)
    t1, cpu1 = now(), (cpu_seconds(pid) if pid else 0.0)
    return {"agent_pid": pid, "agent_cpu_s": cpu1 - cpu0, "start": t0, "end": t1,
            "reads": int(out.stdout.split()[-1])}


class Table:
    """The guest's shared table, mapped read-only, looked up as the shim does."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)

    def holds(self, fid: int, chunk: int) -> int | None:
        """The flags of the entry for (fid, chunk) in the active buffer, or None."""
        hdr = shm._HDR.unpack_from(self.map, 0)
        nbuckets, active = hdr[3], hdr[4] & 1
        base = shm.buffer_offset(nbuckets, active)
        seq = shm._BUF.unpack_from(self.map, base)[0]
        if seq % 2:
            return None  # being written: the next poll reads it
        slot = shm.bucket_hash(fid, chunk) & (nbuckets - 1)
        for _ in range(nbuckets):
            key_fid, key_chunk, flags = shm._ENTRY.unpack_from(
                self.map, base + shm.BUF_HEAD_LEN + slot * shm._ENTRY.size)[:3]
            if not flags & shm.ENTRY_USED:
                return None
            if key_fid == fid and key_chunk == chunk:
                return int(flags)
            slot = (slot + 1) & (nbuckets - 1)
        return None


def trials(cfg: dict[str, Any]) -> dict[str, Any]:
    salt = table_salt()
    table = Table(shm.DEFAULT_TABLE)
    reader = subprocess.Popen(
        ["python3", "-c", READER, str(cfg["file_bytes"]), "0"],
        env=dict(os.environ, LD_PRELOAD=cfg["shim"]), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, bufsize=1)
    assert reader.stdin is not None and reader.stdout is not None
    out: list[dict[str, Any]] = []
    polls = 0
    poll_time = 0.0
    phase = random.Random(cfg["seed"])
    try:
        for i in range(cfg["first_trial"], cfg["files"]):
            path = file_path(cfg, i)
            fid = file_id(salt, path)
            # a random phase against the daemon's rounds and the agent's reports: the
            # previous trial ended just after a round, and starting in step with the
            # rounds would measure one phase only
            time.sleep(phase.uniform(0.0, cfg["jitter_s"]))
            reader.stdin.write(path + "\n")
            reader.stdin.flush()
            ready, _, _ = select.select([reader.stdout], [], [], 60.0)
            if not ready:
                raise SystemExit("the reader did not start reading in 60 s")
            start = float(reader.stdout.readline())
            seen = None
            flags = None
            deadline = start + cfg["timeout_s"]
            while now() < deadline:
                t = now()
                flags = table.holds(fid, 0)
                polls += 1
                poll_time += now() - t
                if flags is not None:
                    seen = now()
                    break
                time.sleep(cfg["poll_s"])
            out.append({"file": f"{fid:x}", "start": start, "seen": seen,
                        "caching": bool(flags and flags & shm.ENTRY_CACHING)})
    finally:
        reader.stdin.close()
        reader.wait(timeout=30)
    return {"trials": out, "lookup_s": poll_time / max(polls, 1)}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    mode = {"prepare": prepare, "steady": steady, "trials": trials}[cfg["mode"]]
    print(json.dumps(mode(cfg)))


main()
