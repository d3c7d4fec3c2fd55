"""Guest-wide replicas never leak a file across users (issue #20).

Runs as root (as `make test` does) with ``nobody`` as the unprivileged user, in a tree
under /tmp that nobody can reach. The agent (a thread here) keeps replicas of a public
file (0644) and of root's secret file (0600), both filled for root's readers. Then, as
nobody:

* reading the public file under the shim is served from the one replica root's reader made;
* the replica directory and files cannot be listed or opened by name;
* a hand-made request on the agent's socket gets a replica only of the file whose readable
  descriptor it sends: an O_PATH descriptor of the secret file (openable without read
  permission) is refused, and naming the secret file's chunk with the public file's
  descriptor returns the public file's bytes;
* the replica descriptor the agent hands out is read-only and cannot be reopened for writing.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from unicache_agent.counters import CounterHarvester
from unicache_agent.shm import CounterLayout, ShmEntry, file_id_of
from unicache_agent.table_writer import TableWriter

from tests.shim.shimtools import CHUNK, ReplicaAgent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

NOBODY = pwd.getpwnam("nobody")
#: a Python nobody may run (the test's own may sit in a tree nobody can reach)
PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
SIZE = 3 * CHUNK + 10

#: run as nobody: one request on the agent's socket with the descriptor `open_how` gives;
#: prints the status and, when a replica came, the bytes of its data and what nobody could
#: do with the replica descriptor
CLIENT = r"""
import array, json, os, socket, struct, sys
sock, path, how, chunk = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
flags = {"read": os.O_RDONLY, "path": os.O_PATH}[how]
src = os.open(path, flags)
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sock)
s.sendmsg([struct.pack("<IIQQQ", 0x51524355, 0, 7, chunk, CHUNK_SIZE)],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [src]))])
data, anc, _f, _a = s.recvmsg(64, socket.CMSG_SPACE(8))
magic, status, rid = struct.unpack("<IiQ", data)
out = {"status": status, "id": rid}
for level, kind, raw in anc:
    fd = array.array("i", raw[:4])[0]
    out["bytes"] = os.pread(fd, 64, 4096).hex()
    try:
        os.pwrite(fd, b"x", 4096)
        out["write"] = "ok"
    except OSError as e:
        out["write"] = e.errno
    try:
        os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        out["reopen"] = "ok"
    except OSError as e:
        out["reopen"] = e.errno
print(json.dumps(out))
""".replace("CHUNK_SIZE", str(CHUNK))

#: run as nobody under the shim: pread the public file, print the hex
PREAD = ("import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fstat(fd); "
         "print(os.pread(fd, 100, int(sys.argv[2])).hex())")


@dataclass
class Tree:
    """The agent's replicas, a table and two files, as a guest has them."""

    root: Path
    table: TableWriter
    counters: CounterHarvester
    replicas: ReplicaAgent
    public: Path
    secret: Path
    env: dict[str, str]

    def as_nobody(self, *cmd: str, shim: bool = True) -> subprocess.CompletedProcess[str]:
        env = self.env if shim else {k: v for k, v in self.env.items() if k != "LD_PRELOAD"}
        return subprocess.run(list(cmd), env=env, capture_output=True, text=True,
                              preexec_fn=_drop, timeout=60, check=False)

    def as_root(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True,
                              timeout=60, check=True)


def _drop() -> None:
    os.setgid(NOBODY.pw_gid)
    os.setuid(NOBODY.pw_uid)


@pytest.fixture
def tree(shim_build: Path) -> Iterator[Tree]:
    root = Path(tempfile.mkdtemp(prefix="uc-replica-access-", dir="/tmp"))
    root.chmod(0o755)
    layout = CounterLayout.of()
    table = TableWriter(str(root / "table"), 1024, counters=layout)
    counters = CounterHarvester(str(root / "counters"), layout)
    replicas = ReplicaAgent(root / "replicas", table)
    rng = random.Random(20)
    public, secret = root / "public", root / "secret"
    public.write_bytes(rng.randbytes(SIZE))
    public.chmod(0o644)
    secret.write_bytes(rng.randbytes(SIZE))
    secret.chmod(0o600)
    time.sleep(0.06)  # older than the replica margin
    entries = []
    for f in (public, secret):
        st = f.stat()
        fid = file_id_of(table.salt, st.st_dev, st.st_ino)
        entries += [ShmEntry(fid, i, frozenset(), replica_nodes=frozenset({0}))
                    for i in range(4)]
    table.publish(1, CHUNK, 4096, entries)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LD_PRELOAD": str(shim_build / "libunicache.so"),
           "UNICACHE_TABLE": str(root / "table"), "UNICACHE_COUNTERS": str(root / "counters"),
           "UNICACHE_REPLICAS": str(root / "replicas"), "UNICACHE_REPLICA_WAIT_MS": "5000"}
    try:
        yield Tree(root, table, counters, replicas, public, secret, env)
    finally:
        replicas.close()
        table.close()
        counters.close()
        shutil.rmtree(root)


def _fills(t: Tree) -> int:
    with t.replicas.lock:
        return t.replicas.store.stats.fills


def test_other_users_get_replicas_only_of_files_they_can_read(tree: Tree) -> None:
    t = tree
    public, secret = t.public.read_bytes(), t.secret.read_bytes()
    for f in (t.public, t.secret):  # root's readers fill both replicas of chunk 1
        got = t.as_root(PYTHON, "-c", PREAD, str(f), str(CHUNK + 5)).stdout.strip()
        assert bytes.fromhex(got) == f.read_bytes()[CHUNK + 5:CHUNK + 105]
    assert _fills(t) == 2
    serves = t.counters.stats().replica_serves

    # nobody's reader of the public file is served from the copy root's reader made
    res = t.as_nobody(PYTHON, "-c", PREAD, str(t.public), str(CHUNK + 50))
    assert res.returncode == 0, res.stderr
    assert bytes.fromhex(res.stdout.strip()) == public[CHUNK + 50:CHUNK + 150]
    assert _fills(t) == 2  # no second copy
    nobody_serves = CounterHarvester(str(t.root / "counters"), t.table.counters)
    try:
        assert nobody_serves.stats().replica_serves > serves  # root's and nobody's files
    finally:
        nobody_serves.close()

    # the secret file itself and the replica files by name: refused by the kernel
    node0 = t.root / "replicas" / "node0"
    assert t.as_nobody("cat", str(t.secret), shim=False).returncode != 0
    assert t.as_nobody("ls", str(node0), shim=False).returncode != 0
    for rep in node0.iterdir():
        assert t.as_nobody("cat", str(rep), shim=False).returncode != 0
    assert all((rep.stat().st_mode & 0o777) == 0o400 for rep in node0.iterdir())

    sock = str(t.root / "replicas" / "socket")
    # an O_PATH descriptor of the secret file (no read permission needed to open it)
    res = t.as_nobody(PYTHON, "-c", CLIENT, sock, str(t.secret), "path", "1",
                      shim=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"status": 22, "id": 7}  # EINVAL, nothing attached
    # the public file's descriptor: its own replica, whatever chunk of whichever file
    # nobody has in mind; read-only, and not reopenable for writing
    res = t.as_nobody(PYTHON, "-c", CLIENT, sock, str(t.public), "read", "1",
                      shim=False)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["status"] == 0
    assert bytes.fromhex(got["bytes"]) == public[CHUNK:CHUNK + 64] != secret[CHUNK:CHUNK + 64]
    assert got["write"] == 9 and got["reopen"] == 13  # EBADF, EACCES
    assert _fills(t) == 2
