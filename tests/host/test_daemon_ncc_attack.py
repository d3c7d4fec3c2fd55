"""The NCC flood of issue #12 against the real daemon: a guest with two NUMA nodes.

NCC runs only for a VM whose *backend* says it has several guest nodes (a guest's own
claim counts for nothing), so the hostile VM here comes from the embedded QEMU backend's
registry, as ``unicache vm start --numa`` records it: a stand-in QEMU process (vCPU threads
named as QEMU names them, and a QMP socket answering ``query-cpus-fast``) registered with
two guest nodes. Its guest, spoken for by the test, sends what froze the host for more than
250 s in the issue: maximum-size reports of remote reads (so NCC counts every chunk on the
remote node), then the same chunks written. The benign VM, registered the same way with
one node, times its syncs all along.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicache.host.procfs_source import vcpu_threads_of

from tests.host.test_daemon_attacks import flood_daemon

#: a QEMU stand-in: two idle vCPU threads and a QMP socket (argv[1]) that answers the
#: greeting, qmp_capabilities and query-cpus-fast as QEMU does
QMP_QEMU = r"""
import ctypes, json, os, socket, sys, threading, time
libc = ctypes.CDLL(None)
tids = {}
def vcpu(n):
    libc.prctl(15, f"CPU {n}/TCG".encode(), 0, 0, 0)  # PR_SET_NAME, as QEMU names vCPUs
    tids[n] = threading.get_native_id()
    time.sleep(180)
for n in range(2):
    threading.Thread(target=vcpu, args=(n,), daemon=True).start()
def serve(conn):
    greeting = {"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0},
                                    "package": ""}, "capabilities": []}}
    conn.sendall(json.dumps(greeting).encode() + b"\r\n")
    buf, dec = "", json.JSONDecoder()
    while data := conn.recv(65536):
        buf += data.decode()
        while buf.strip():  # commands are JSON objects, not necessarily one per line
            try:
                cmd, end = dec.raw_decode(buf.lstrip())
            except ValueError:
                break
            buf = buf.lstrip()[end:]
            ret = {}
            if cmd.get("execute") == "query-cpus-fast":
                ret = [{"cpu-index": n, "thread-id": t, "qom-path": f"/machine/cpu[{n}]",
                        "target": "x86_64"} for n, t in sorted(tids.items())]
            reply = {"return": ret}
            if "id" in cmd:
                reply["id"] = cmd["id"]
            conn.sendall(json.dumps(reply).encode() + b"\r\n")
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen()
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def _start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime


def _register(registry: Path, name: str, pid: int, run: Path, nodes: list[str]) -> Path:
    """The registry record ``unicache vm start`` writes, for a stand-in QEMU."""
    agent = run / f"{name}-agent.sock"
    numa = [{"node": i, "cpus": cpus, "memory_mib": 256 // len(nodes)}
            for i, cpus in enumerate(nodes)]
    record = {
        "name": name, "pid": pid, "start_ticks": _start_ticks(pid),
        "qmp_socket": str(run / f"{name}-qmp.sock"), "agent_socket": str(agent),
        "agent_listen": False, "control_socket": str(run / f"{name}-control.sock"),
        "console_log": str(run / f"{name}.log"), "vcpus": 2, "memory_mib": 256,
        "accel": "tcg", "numa": numa, "run_dir": str(run), "started": time.time(),
    }
    (registry / f"{name}.json").write_text(json.dumps(record))
    return agent


@pytest.fixture
def registered(tmp_path: Path) -> Iterator[tuple[Path, Path, int]]:
    """(registry, run dir, benign pid) with 'hostile' (two nodes) and 'benign' registered."""
    registry, run = tmp_path / "vms", tmp_path / "run"
    registry.mkdir()
    run.mkdir()
    procs = {}
    for name in ("hostile", "benign"):
        procs[name] = subprocess.Popen([sys.executable, "-c", QMP_QEMU,
                                        str(run / f"{name}-qmp.sock")])
    try:
        for name, proc in procs.items():
            for _ in range(200):
                if len(vcpu_threads_of(proc.pid)) == 2 and (run / f"{name}-qmp.sock").exists():
                    break
                time.sleep(0.05)
        _register(registry, "hostile", procs["hostile"].pid, run, ["0", "1"])
        _register(registry, "benign", procs["benign"].pid, run, ["0-1"])
        yield registry, run, procs["benign"].pid
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_an_ncc_flood_from_a_two_node_guest_cannot_stall_the_others_or_the_shutdown(
    tmp_path: Path, registered: tuple[Path, Path, int]
) -> None:
    registry, run, benign_pid = registered
    env = dict(os.environ, UNICACHE_STATE_DIR=str(registry))
    records = flood_daemon(tmp_path / "state", [], env, run / "hostile-agent.sock",
                           run / "benign-agent.sock", benign_pid)
    # NCC really ran for the hostile VM on its backend's two nodes: it replicated chunks
    # onto the node that read them remotely
    replicas = [r for r in records if r.get("kind") == "replicate"
                and str(r.get("vm", r.get("target", ""))).startswith("hostile")]
    assert replicas, sorted({str(r.get("kind")) for r in records})
