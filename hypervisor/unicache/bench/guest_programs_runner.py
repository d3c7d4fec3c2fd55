"""The guest side of ``unicache bench programs``: prepare the data, time programs, read counts.

This file is a program for the guest's ``python3`` (Debian 12: Python 3.11, standard
library plus the image's agent package, for the layout of the table and the counters):
the host reads it as text and runs it with ``python3 -c PROGRAM JSON`` through the
guest's command runner (:mod:`guest_programs`); nothing on the host imports it. The JSON
argument is one object with ``mode``:

* ``prepare``: write ``small_files`` files of 512 B to 8 KiB under ``dir``/small (for
  ``sha256sum``), a sqlite database ``dir``/bench.db of ``sqlite_rows`` rows (through the
  sqlite3 CLI, the program timed later), and say what the shim will find: the agent's
  pid, the shared table (valid, its entry count: "nothing placed" is 0 entries) and this
  user's counters file;
* ``runs``: run one program (``argv``, in ``cwd``) once per side of ``sides`` (``with``:
  ``LD_PRELOAD`` = ``shim``; ``without``: no preload), in that order, each timed on the
  guest's clock (``time.perf_counter`` around the whole process); print per run its
  seconds, exit status, a digest of its output, and what the shim counted into this
  user's counters file during it (bytes and reads summed over both regions of the file:
  nothing harvests them while no host daemon greets the agent, so the sums only grow);
* ``calls``: what the shim's costs rest on, on the guest's clock: ``uc_selftest calls``
  (``selftest``, no preload: a bare system call, open + close, and the two fstat calls the
  shim chooses between), and the start of a process that opens nothing (``/bin/true``) and
  of one that opens a file (``cat /dev/null``) with no preload, with a preload that does
  nothing (``null``), with the shim, and with the shim switched off by its scope file
  (``off``: what a process out of every scope pays), alternating, ``starts`` times each
  (median microseconds).

The programs run with a fixed environment (PATH, HOME, LANG, and the preload on the
``with`` side only): what differs between the two sides is the shim alone.
"""

import hashlib
import json
import os
import random
import subprocess
import sys
import time
from typing import Any

#: the environment both sides run with (the ``with`` side adds LD_PRELOAD)
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LANG": "C.UTF-8"}


def agent_shm(agent_lib: str) -> Any:
    """The image's agent package's shared-memory layout (imported here only: the
    programs timed never see the agent's directory on their path)."""
    sys.path.insert(0, agent_lib)
    from unicache_agent import shm

    return shm


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


def table_state(shm: Any) -> dict[str, Any]:
    """The shared table as the shim maps it: present, valid, and its active entries."""
    path = shm.DEFAULT_TABLE
    if not os.path.exists(path):
        return {"path": path, "exists": False}
    with open(path, "rb") as f:
        data = f.read()
    magic, layout, _salt, nbuckets, active = shm._HDR.unpack_from(data, 0)[:5]
    base = shm.buffer_offset(nbuckets, active)
    (_seq, version, chunk_size, _mrs, nentries, flags, sample_bytes,
     sample_shift) = shm._BUF.unpack_from(data, base)
    return {"path": path, "exists": True, "valid": magic == shm.TABLE_MAGIC,
            "layout": layout, "version": version, "chunk_size": chunk_size,
            "entries": nentries, "flags": flags, "sample_bytes": sample_bytes,
            "sample_shift": sample_shift}


def counted(shm: Any, path: str) -> tuple[int, int, int, int]:
    """(bytes, reads, dropped, clients) this user's shims counted into ``path`` so far: every
    cell of both regions summed, the drops, and the processes that mapped it (0s when there
    is no file yet)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0, 0, 0, 0
    hdr = shm._CHDR.unpack_from(data, 0)
    lay = shm.CounterLayout(hdr[2], hdr[3], hdr[10])
    dropped, clients = hdr[6] + hdr[7], hdr[8]
    step = lay.slot_size // 8
    head = shm._SLOT.size // 8
    nbytes = reads = 0
    for which in (0, 1):
        first = lay.region_offset(which) + lay.slots_offset
        words = memoryview(data)[first:lay.region_offset(which) + lay.region_len].cast("Q")
        for v in range(lay.max_vcpus):
            for cell in words[head + v::step].tolist():
                if cell:
                    nbytes += cell & shm.CELL_BYTES_MASK
                    reads += cell >> shm.CELL_BYTES_BITS
    return nbytes, reads, dropped, clients


def counters_path(shm: Any) -> str:
    return os.path.join(shm.DEFAULT_COUNTERS, str(os.geteuid()))


def prepare(cfg: dict[str, Any]) -> dict[str, Any]:
    shm = agent_shm(cfg["agent_lib"])
    small = os.path.join(cfg["dir"], "small")
    os.makedirs(small, exist_ok=True)
    rng = random.Random(cfg["seed"])
    for i in range(cfg["small_files"]):
        with open(os.path.join(small, f"f{i:05d}"), "wb") as f:
            f.write(rng.randbytes(rng.randrange(512, 8193)))
    db = os.path.join(cfg["dir"], "bench.db")
    if os.path.exists(db):
        os.unlink(db)
    rows = "\n".join(
        f"INSERT INTO t VALUES ({i}, {rng.randrange(1 << 30)}, '{rng.randbytes(48).hex()}');"
        for i in range(cfg["sqlite_rows"]))
    script = ("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER, body TEXT);\n"
              f"BEGIN;\n{rows}\nCOMMIT;\n")
    subprocess.run(["sqlite3", db], input=script, text=True, check=True, env=BASE_ENV)
    # everything once into the page cache, before anything is timed
    for root, _dirs, files in os.walk(cfg["dir"]):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                f.read()
    os.sync()
    path = counters_path(shm)
    return {"agent_pid": agent_pid(), "table": table_state(shm), "counters": path,
            "counters_exist": os.path.exists(path), "shim_exists": os.path.exists(cfg["shim"])}


def runs(cfg: dict[str, Any]) -> dict[str, Any]:
    shm = agent_shm(cfg["agent_lib"])
    path = counters_path(shm)
    out = []
    for side in cfg["sides"]:
        env = dict(BASE_ENV, LD_PRELOAD=cfg["shim"]) if side == "with" else dict(BASE_ENV)
        before = counted(shm, path)
        t0 = time.perf_counter()
        proc = subprocess.run(cfg["argv"], env=env, cwd=cfg["cwd"], capture_output=True,
                              stdin=subprocess.DEVNULL, check=False)
        seconds = time.perf_counter() - t0
        after = counted(shm, path)
        out.append({"side": side, "seconds": seconds, "exit": proc.returncode,
                    "digest": hashlib.sha256(proc.stdout).hexdigest()[:16],
                    "first_line": proc.stdout.split(b"\n", 1)[0][:80].decode(errors="replace"),
                    "stderr": proc.stderr[-300:].decode(errors="replace"),
                    "counted_bytes": after[0] - before[0], "counted_reads": after[1] - before[1],
                    "dropped": after[2] - before[2], "clients": after[3] - before[3]})
    return {"runs": out, "table": table_state(shm), "agent_pid": agent_pid()}


def calls(cfg: dict[str, Any]) -> dict[str, Any]:
    res = subprocess.run([cfg["selftest"], "calls", str(cfg["n"]), "/etc/passwd"],
                         env=BASE_ENV, capture_output=True, text=True, check=True)
    # "off": the shim loaded but switched off by its scope file (root's, mode 0644), as a
    # process out of every scope finds it
    off = os.path.join(cfg["dir"], "shim-off.conf")
    with open(off, "w") as f:
        f.write("off\n")
    os.chmod(off, 0o644)
    preloads = {"none": {}, "null": {"LD_PRELOAD": cfg["null"]},
                "shim": {"LD_PRELOAD": cfg["shim"]},
                "off": {"LD_PRELOAD": cfg["shim"], "UNICACHE_SHIM_CONF": off}}
    starts: dict[str, dict[str, float]] = {}
    for argv in (["/bin/true"], ["/bin/cat", "/dev/null"]):
        times: dict[str, list[float]] = {name: [] for name in preloads}
        for _ in range(cfg["starts"]):
            for name, extra in preloads.items():
                env = dict(BASE_ENV, **extra)
                t0 = time.perf_counter()
                subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
                times[name].append((time.perf_counter() - t0) * 1e6)
        starts[" ".join(argv)] = {name: round(sorted(v)[len(v) // 2], 1)
                                  for name, v in times.items()}
    return {"calls": json.loads(res.stdout), "starts": starts}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    mode = {"prepare": prepare, "runs": runs, "calls": calls}[cfg["mode"]]
    print(json.dumps(mode(cfg)))


main()
