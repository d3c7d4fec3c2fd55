"""The replica socket's own thread: it keeps the agent's starting priority while the rest of
the agent runs niced, answers requests, and runs the agent's store calls in order.

Real sockets and files (replica files in a temporary directory, not mounted); the niced
agent is a child process (a thread's nice value cannot be raised back without privilege).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from unicache_agent.replica_server import ReplicaServer
from unicache_agent.replica_service import ReplicaService
from unicache_agent.replica_store import ReplicaStore

AGENT_DIR = Path(__file__).resolve().parents[2] / "guest-agent"
CHUNK = 65536
SALT = 0x1234567

#: a niced agent (as __main__ starts it: the service first, then the agent's nice) and a
#: shim's request over the real socket; prints both threads' nice values and the answer
CHILD = r"""
import array, json, os, socket, struct, sys, time
sys.path.insert(0, sys.argv[1])
from unicache_agent.replica_server import ReplicaServer, REQ_MAGIC
from unicache_agent.replica_service import ReplicaService
from unicache_agent.replica_store import ReplicaStore
from unicache_agent.shm import file_id_of
root, chunk, salt = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
src = os.path.join(root, "src")
with open(src, "wb") as f:
    f.write(b"x" * (chunk + 10))
time.sleep(0.05)  # older than the fill margin (20 ms)
st = os.stat(src)
fid = file_id_of(salt, st.st_dev, st.st_ino)
store = ReplicaStore(os.path.join(root, "rep"), {0: 1 << 30}, salt, mount=False)
service = ReplicaService(ReplicaServer(store, os.path.join(root, "rep", "socket")))
service.start()
os.setpriority(os.PRIO_PROCESS, 0, 19)
service.call(lambda s: s.set_table(chunk, {(fid, 0): frozenset({0})}))
c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
c.connect(os.path.join(root, "rep", "socket"))
fd = os.open(src, os.O_RDONLY)
c.sendmsg([struct.pack("<IIQQQ", REQ_MAGIC, 0, 7, 0, chunk)],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
data, anc, _flags, _addr = c.recvmsg(16, socket.CMSG_SPACE(4))
magic, status, rid = struct.unpack("<IiQ", data)
nice = {t.name: os.getpriority(os.PRIO_PROCESS, t.native_id)
        for t in __import__("threading").enumerate()}
service.close()
print(json.dumps({"status": status, "id": rid, "fds": len(anc), "nice": nice,
                  "fills": store.stats.fills}))
"""


def test_the_replica_thread_answers_at_the_agents_starting_priority(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, str(AGENT_DIR), str(tmp_path),
                          str(CHUNK), str(SALT)], capture_output=True, text=True, timeout=60,
                         check=True)
    got = json.loads(out.stdout)
    assert (got["status"], got["id"], got["fds"], got["fills"]) == (0, 7, 1, 1), got
    assert got["nice"] == {"MainThread": 19, "unicache-replicas": 0}, got


def test_store_calls_run_in_order_on_the_thread_and_inline_once_it_stopped(
        tmp_path: Path) -> None:
    store = ReplicaStore(str(tmp_path / "rep"), {0: 1 << 30}, SALT, mount=False)
    service = ReplicaService(ReplicaServer(store, str(tmp_path / "rep" / "socket")))
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def note(i: int) -> None:
        seen.append((i, threading.current_thread().name))
        if i == 2:
            done.set()

    def fail(_store: ReplicaStore) -> None:
        raise RuntimeError("one call fails")

    service.call(lambda _s: note(0))  # not started: here and now
    service.start()
    service.call(lambda _s: note(1))
    service.call(fail)  # logged; the calls after it still run
    service.call(lambda _s: note(2))
    assert done.wait(30)
    service.close()
    service.call(lambda _s: note(3))
    main = threading.current_thread().name
    assert [i for i, _ in seen] == [0, 1, 2, 3]
    assert seen[0][1] == main and seen[3][1] == main
    assert seen[1][1] == seen[2][1] == "unicache-replicas"
