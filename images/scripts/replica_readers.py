"""Runs in a guest: several reader processes per node, every read call, one replica a node.

``python3 replica_readers.py main DATA CHUNK PROCS`` (as root, the agent running with its
default replica store ``/run/unicache/replicas``, every chunk of DATA replicated on every
node by the host's table). For each read call (read, pread, readv, preadv, sendfile) it
starts PROCS reader processes pinned to each node's CPUs, under the shim, at once; each
reads 4000 bytes inside every chunk of DATA with that call and compares them with what the
plain calls read (without the shim), pass after pass for READ_S seconds, and, for the calls
a replica serves (SERVED), on until every chunk has been served and AFTER_PASSES passes more
were made (at most MAX_READ_S): a shim does not wait for the agent, so a process's first
reads of a chunk may be the real calls, and every read after the agent's answer is served.
The vectored reads are never served (the shim does not read the caller's iovec array
before the call: docs/agent.md), only compared. Each reader counts its own serves (reads
that made no read system call), per chunk the pass of the first one, and the reads not
served after it (lapses). Between kinds it reads the shims' statistics (root's counters
file). Prints one JSON object: serves per kind, the
readers' results, the pages each reader's replica mappings had on each node
(``/proc/self/numa_maps``) and, per node, the replica files and the bytes their tmpfs
holds (``statvfs``). ``reader`` is the mode the readers run in.
"""

import json
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, "/usr/lib/unicache-agent")
from unicache_agent.shm import CounterLayout

SHIM = "/usr/lib/unicache-agent/libunicache.so"
STORE = "/run/unicache/replicas"
KINDS = ("read", "pread", "readv", "preadv", "sendfile")
#: the calls a replica serves
SERVED = ("read", "pread", "sendfile")
SPAN = 4000
#: how long each reader reads at least (passes over the file, a pause between them), how
#: long at most, and how many passes it makes after every chunk was first served
READ_S = 3.0
MAX_READ_S = 60.0
AFTER_PASSES = 5


def segments(size, chunk):
    """(offset, length) read in each chunk: inside it, never across."""
    return [(off + 100, min(SPAN, size - off - 100)) for off in range(0, size, chunk)
            if size - off > 100]


def read_with(kind, fd, off, n):
    if kind == "pread":
        return os.pread(fd, n, off)
    if kind == "sendfile":
        r, w = os.pipe()
        try:
            sent = os.sendfile(w, fd, off, n)
            return os.read(r, sent)
        finally:
            os.close(r)
            os.close(w)
    bufs = [bytearray(n // 2), bytearray(n - n // 2)]
    if kind == "preadv":
        got = os.preadv(fd, bufs, off)
    else:
        os.lseek(fd, off, os.SEEK_SET)
        if kind == "read":
            return os.read(fd, n)
        got = os.readv(fd, bufs)
    return b"".join(bufs)[:got]


def replica_pages():
    """node dir -> {page node: pages} of this process's mappings of replica files."""
    out = {}
    with open("/proc/self/numa_maps") as f:
        for line in f:
            if STORE not in line:
                continue
            where = line.split(STORE + "/")[1].split("/")[0]
            per = out.setdefault(where, {})
            for word in line.split():
                if word.startswith("N") and "=" in word:
                    node, pages = word[1:].split("=")
                    per[node] = per.get(node, 0) + int(pages)
    return out


def read_syscalls():
    """The read system calls this process has made (``syscr`` of /proc/self/io), with
    exactly one read system call of its own."""
    fd = os.open("/proc/self/io", os.O_RDONLY)
    try:
        text = os.read(fd, 4096).decode()
    finally:
        os.close(fd)
    for line in text.splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    return 0


def reader(kind, data, chunk, cpus, expected):
    """Read every chunk pass after pass, for READ_S at least and until every chunk has
    been served and AFTER_PASSES passes more were made (MAX_READ_S at most). Counts, per
    chunk, the pass of its first serve and its reads not served after that (lapses)."""
    os.sched_setaffinity(0, cpus)
    size = os.path.getsize(data)
    fd = os.open(data, os.O_RDONLY)
    os.fstat(fd)  # as programs do: the shim learns the file from it (docs/agent.md)
    bad = passes = served = lapses = 0
    first = [None] * len(expected)  # pass of each chunk's first serve
    per_pass = []  # reads served in each pass
    t0 = time.monotonic()
    pages = {}
    waits = kind in SERVED  # for every chunk's first serve and the passes after it
    while time.monotonic() - t0 < MAX_READ_S and (
            passes < 2 or time.monotonic() - t0 < READ_S
            or (waits and (None in first or passes - max(first) <= AFTER_PASSES))):
        now = 0
        for i, ((off, n), want) in enumerate(zip(segments(size, chunk), expected,
                                                 strict=True)):
            before = read_syscalls()
            bad += read_with(kind, fd, off, n) != want
            # a read served from a replica makes no read system call: only the one that
            # reads /proc/self/io here is counted (sendfile reads the pipe back: one more)
            hit = read_syscalls() - before == (2 if kind == "sendfile" else 1)
            now += hit
            if hit and first[i] is None:
                first[i] = passes
            lapses += not hit and first[i] is not None
        served += now
        per_pass.append(now)
        passes += 1
        pages = replica_pages()  # while the mappings are alive
        time.sleep(0.05)
    os.close(fd)
    print(json.dumps({"bad": bad, "passes": passes, "served": served, "pages": pages,
                      "first": first, "lapses": lapses, "per_pass": per_pass,
                      "s": round(time.monotonic() - t0, 1)}))


def serves(field=0):
    """Replica serves (or another statistic: fills 1, rejects 2, aborts 3, asks 6, waits
    7) of root's shims so far (the counters file's statistics)."""
    with open("/dev/shm/unicache-table", "rb") as f:
        hdr = f.read(64)
    # the table header's counters layout: ctr_nslots ctr_max_vcpus node_mask ctr_ngens
    nslots, max_vcpus, _node_mask, ngens = struct.unpack_from("<IIII", hdr, 40)
    lay = CounterLayout(nslots, max_vcpus, ngens)
    try:
        with open("/dev/shm/unicache-counters/0", "rb") as f:
            f.seek(lay.gen_base + 8 * field)
            return struct.unpack("<Q", f.read(8))[0]
    except FileNotFoundError:  # no shim of root's has run yet
        return 0


def node_cpus():
    out = {}
    base = "/sys/devices/system/node"
    for name in sorted(os.listdir(base)):
        if name.startswith("node") and name[4:].isdigit():
            with open(f"{base}/{name}/cpulist") as f:
                text = f.read().strip()
            cpus = set()
            for part in filter(None, text.split(",")):
                a, _, b = part.partition("-")
                cpus.update(range(int(a), int(b or a) + 1))
            if cpus:
                out[int(name[4:])] = cpus
    return out


def main(data, chunk, procs):
    size = os.path.getsize(data)
    fd = os.open(data, os.O_RDONLY)
    expected = [os.pread(fd, n, off) for off, n in segments(size, chunk)]
    os.close(fd)
    with open("/var/tmp/replica-expected.json", "w") as f:
        json.dump([e.hex() for e in expected], f)
    env = {**os.environ, "LD_PRELOAD": SHIM}
    result = {"kinds": {}, "readers": []}
    for kind in KINDS:
        before = serves()
        started = [subprocess.Popen([sys.executable, __file__, "reader", kind, data, str(chunk),
                                     ",".join(map(str, cpus))], env=env,
                                    stdout=subprocess.PIPE, text=True)
                   for node, cpus in node_cpus().items() for _ in range(procs)]
        nodes = [n for n in node_cpus() for _ in range(procs)]
        for node_and_proc, p in zip(nodes, started, strict=True):
            out, _ = p.communicate(timeout=300)
            rec = json.loads(out) if p.returncode == 0 else {"exit": p.returncode}
            result["readers"].append({"kind": kind, "node": node_and_proc, **rec})
        result["kinds"][kind] = serves() - before
        result.setdefault("stats", {})[kind] = [serves(i) for i in (0, 1, 2, 3, 6, 7)]
    result["store"] = {}
    for name in sorted(os.listdir(STORE)):
        path = os.path.join(STORE, name)
        if name.startswith("node") and os.path.isdir(path):
            st = os.statvfs(path)
            result["store"][name] = {"files": len(os.listdir(path)),
                                     "bytes": (st.f_blocks - st.f_bfree) * st.f_frsize}
    with open("/proc/mounts") as f:
        result["mounts"] = [line.split()[3] for line in f if STORE in line]
    result["meminfo"] = {}
    for node in node_cpus():
        with open(f"/sys/devices/system/node/node{node}/meminfo") as f:
            result["meminfo"][node] = [" ".join(line.split()[2:4]) for line in f
                                       if "MemFree" in line or "Inactive(file)" in line]
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "reader":
        kind, data, chunk, cpus = sys.argv[2:6]
        with open("/var/tmp/replica-expected.json") as f:
            expected = [bytes.fromhex(h) for h in json.load(f)]
        reader(kind, data, int(chunk), {int(c) for c in cpus.split(",")}, expected)
    else:
        main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
