"""The replica socket's own process: it keeps the agent's starting priority while the agent
runs niced, answers requests, runs the agent's store calls in order before the requests
that follow them, and drops every replica when the agent stops it or goes away.

Real sockets, files and processes (replica files in a temporary directory, not mounted);
the niced agent is a child of the test (its nice value cannot be raised back).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

AGENT_DIR = Path(__file__).resolve().parents[2] / "guest-agent"
CHUNK = 65536

#: a niced agent as __main__ starts it (the service first, then the agent's nice), and a
#: shim's requests over the real socket; prints the answers, both nice values and what is
#: left of the replicas after the service stopped
CHILD = r"""
import array, errno, json, os, socket, struct, sys, time
sys.path.insert(0, sys.argv[1])
from unicache_agent.replica_server import ReplicaServer, REQ_MAGIC
from unicache_agent.replica_service import ReplicaService
from unicache_agent.replica_store import ReplicaStore
from unicache_agent.shm import file_id_of
root, chunk, mode = sys.argv[2], int(sys.argv[3]), sys.argv[4]
salt = 0x1234567
src = os.path.join(root, "src")
with open(src, "wb") as f:
    f.write(b"x" * (chunk + 10))
time.sleep(0.05)  # older than the fill margin (20 ms)
st = os.stat(src)
fid = file_id_of(salt, st.st_dev, st.st_ino)
store = ReplicaStore(os.path.join(root, "rep"), {0: 1 << 30}, salt, mount=False)
service = ReplicaService(ReplicaServer(store, os.path.join(root, "rep", "socket")))
service.call("set_table", chunk, {(fid, 0): frozenset({0})})  # not started: here
service.start()
os.setpriority(os.PRIO_PROCESS, 0, 19)
c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
c.connect(os.path.join(root, "rep", "socket"))
fd = os.open(src, os.O_RDONLY)

def ask(rid):
    c.sendmsg([struct.pack("<IIQQQ", REQ_MAGIC, 0, rid, 0, chunk)],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    data, anc, _flags, _addr = c.recvmsg(16, socket.CMSG_SPACE(4))
    return list(struct.unpack("<IiQ", data)[1:]) + [len(anc)]

out = {"first": ask(1)}
service.call("set_table", chunk, {})  # the table no longer lists it: refused from now on
out["after"] = ask(2)
out["nice"] = [os.getpriority(os.PRIO_PROCESS, 0),
               os.getpriority(os.PRIO_PROCESS, service.pid)]
files = os.path.join(root, "rep", "node0")
service.call("set_table", chunk, {(fid, 0): frozenset({0})})
out["again"] = ask(3)
out["held"] = len(os.listdir(files))
if mode == "close":
    service.close(unmount=True)
    out["left"] = [len(os.listdir(files)), os.path.exists(os.path.join(root, "rep", "socket"))]
print(json.dumps(out), flush=True)
if mode == "die":
    os._exit(0)  # the agent dies: its service ends on its own (end of file)
"""


def _run(tmp_path: Path, mode: str) -> dict[str, list[int]]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(AGENT_DIR), str(tmp_path),
                          str(CHUNK), mode], capture_output=True, text=True, timeout=60,
                         check=True)
    return dict(json.loads(out.stdout))


def test_the_replica_process_answers_at_the_agents_starting_priority(tmp_path: Path) -> None:
    got = _run(tmp_path, "close")
    assert got["first"] == [0, 1, 1], got  # status, request id, one descriptor
    assert got["after"] == [2, 2, 0], got  # ENOENT: the call ran before the next request
    assert got["again"] == [0, 3, 1] and got["held"] == 1, got
    assert got["nice"] == [19, 0], got
    assert got["left"] == [0, False], got  # every replica dropped, the socket gone


def test_the_replica_process_ends_when_the_agent_dies(tmp_path: Path) -> None:
    got = _run(tmp_path, "die")
    assert got["again"] == [0, 3, 1] and got["held"] == 1, got
    files = tmp_path / "rep" / "node0"
    deadline = time.monotonic() + 30
    while (list(files.iterdir()) or (tmp_path / "rep" / "socket").exists()) and (
            time.monotonic() < deadline):
        time.sleep(0.05)
    assert not list(files.iterdir()) and not (tmp_path / "rep" / "socket").exists()
