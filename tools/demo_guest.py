"""What ``make demo`` runs inside the guest (tools/demo.py): the MFC read benchmark, grep
and wc timed, a throttled backup stream, a hot file, the shim's statistics, and where a
file's page cache lies. Each is a Python program passed with ``python3 -c '...'``, so none
may hold a single quote.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: prints the guest node of each resident page-cache page of a file (run in the guest)
PAGE_NODES = (ROOT / "images" / "scripts" / "page_nodes.py").read_text()

#: the MFC paper's read microbenchmark (§6.1): pick a file at random, pread it whole
READ_BENCH = r"""
import os, random, sys, time
files = sys.argv[2:]
fds = [os.open(f, os.O_RDONLY) for f in files]
sizes = [os.fstat(fd).st_size for fd in fds]
rng = random.Random(1)
total = 0
end = time.time() + float(sys.argv[1])
start = time.time()
while time.time() < end:
    i = rng.randrange(len(fds))
    off = 0
    while off < sizes[i]:
        n = len(os.pread(fds[i], 512 * 1024, off))
        off += n
        total += n
print(total / (time.time() - start) / 1e6)
"""


#: grep/wc over the files, again and again, timed; argv[3] is the shim to preload or "-"
TOOL_BENCH = r"""
import ast, os, subprocess, sys, time
argv = ast.literal_eval(sys.argv[2])
env = dict(os.environ)
files = sys.argv[4:]
if sys.argv[3] != "-":
    env["LD_PRELOAD"] = sys.argv[3]
total = 0
end = time.time() + float(sys.argv[1])
start = time.time()
while time.time() < end:
    for f in files:
        subprocess.run(argv + [f], env=env, stdout=subprocess.DEVNULL, check=False)
        total += os.path.getsize(f)
print(total / (time.time() - start) / 1e6)
"""


#: a backup stream: pread 512 KiB at a time, throttled (a backup tool's rate limit)
STREAM_READ = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
for off in range(0, size, 512 * 1024):
    os.pread(fd, 512 * 1024, off)
    time.sleep(0.25)
"""

#: a hot file read again and again with pread for argv[1] seconds
HOT_READ = r"""
import os, sys, time
fd = os.open(sys.argv[2], os.O_RDONLY)
size = os.fstat(fd).st_size
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for off in range(0, size, 64 * 1024):
        os.pread(fd, 64 * 1024, off)
    time.sleep(0.01)
"""


#: the statistics of this user's shims (root's, as guest commands run) from its counters
#: file (read-only); all zero when no shim ever ran (no file)
SHIM_STATS = r"""
import json, mmap, os, sys
sys.path.insert(0, "/usr/lib/unicache-agent")
from unicache_agent import shm
names = ["replica_serves", "replica_fills", "replica_rejects", "fill_aborts",
         "color_reads", "gen_bumps"]
try:
    f = open(os.path.join(shm.DEFAULT_COUNTERS, str(os.geteuid())), "rb")
except FileNotFoundError:
    print(json.dumps(dict.fromkeys(names, 0)))
    sys.exit(0)
with f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    head = shm._CHDR.unpack_from(m, 0)
    # after the header, the claims and the two regions
    base = shm.CounterLayout(head[2], head[3], head[10]).gen_base
    print(json.dumps(dict(zip(names, shm._GHDR.unpack_from(m, base)))))
"""


#: the agent's replica store: files and bytes held by each node's tmpfs
STORE_USAGE = r"""
import json, os
root = "/run/unicache/replicas"
out = {}
for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    path = os.path.join(root, name)
    if name.startswith("node") and os.path.isdir(path):
        st = os.statvfs(path)
        names = sorted(os.listdir(path))
        out[name] = {"files": len(names),
                     "bytes": (st.f_blocks - st.f_bfree) * st.f_frsize,
                     "sizes": {n: os.stat(os.path.join(path, n)).st_blocks * 512
                               for n in names}}
print(json.dumps(out))
"""
