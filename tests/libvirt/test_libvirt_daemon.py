"""The daemon on libvirt domains: it keeps running and keeps its state across a libvirtd restart
and a domain destroyed mid-run, and its channel server reaches QEMU through the domain's channel.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from unicache.config import DaemonConfig
from unicache.daemon import run_daemon
from unicache.errors import StateError
from unicache.host.libvirt.channel import make_placeholder_socket
from unicache.host.libvirt.domain_xml import parse_domain
from unicache.host.libvirt.source import LibvirtVmSource
from unicache.statefile import status_checkpoint
from unicache.topology import Unify

from tests.libvirt.conftest import URI, Libvirtd, wait_for


def _status(state: Path) -> dict[str, Any] | None:
    try:
        return status_checkpoint(state).load()
    except StateError:  # being replaced: the next look sees the new one
        return None


def _vms(state: Path) -> set[str]:
    status = _status(state)
    return set() if status is None else {v["vm"] for v in status["vcpus"]}


def _connected(path: Path) -> bool:
    # /proc/net/unix: a connected socket bound to the path has state 03 (SS_CONNECTED)
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == str(path) and fields[5] == "03":
            return True
    return False


class _Daemon:
    def __init__(self, config: DaemonConfig, source: LibvirtVmSource) -> None:
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, args=(config, source), daemon=True)

    def _run(self, config: DaemonConfig, source: LibvirtVmSource) -> None:
        asyncio.set_event_loop(self.loop)
        self.code = self.loop.run_until_complete(run_daemon(config, source, None, self.stop))

    def __enter__(self) -> _Daemon:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(timeout=30)


def test_daemon_keeps_state_across_libvirtd_restart_and_a_destroyed_domain(
    libvirtd: Libvirtd, make_domain: Any, socket_dir: Path
) -> None:
    sock = socket_dir / "daemon-vm.sock"
    lose_sock = socket_dir / "daemon-lose.sock"
    make_placeholder_socket(sock)
    make_placeholder_socket(lose_sock)
    keep = make_domain("dkeep", vcpus=2, channel=sock)
    lose = make_domain("dlose", vcpus=1, channel=lose_sock)
    bound = make_domain("dbind", vcpus=1, bind_channel=True)  # as `unicache attach` adds
    bound_sock = parse_domain(bound.XMLDesc(0)).agent_socket
    assert bound_sock is not None
    state = socket_dir / "state"
    source = LibvirtVmSource(URI, reconnect_interval_s=0.2)
    source.connect()
    config = DaemonConfig(interval_s=0.2, unify=Unify("l2"), state_dir=state)
    with _Daemon(config, source) as daemon:
        wait_for(lambda: {keep.name(), lose.name()} <= _vms(state), what="both domains seen")
        # QEMU (as libvirt-qemu) connects to the socket the daemon listens on
        wait_for(lambda: _connected(sock), timeout=15, what="QEMU connected to the channel")
        # and the daemon dials the socket QEMU listens on, for the bind-mode channel
        wait_for(lambda: _connected(bound_sock), timeout=15, what="the daemon dialed QEMU")

        libvirtd.restart()
        before = _status(state)
        assert before is not None
        wait_for(lambda: source.reconnects >= 1, what="reconnect")
        after = wait_for(
            lambda: (s := _status(state)) is not None and s["tick"] >= before["tick"] + 5 and s,
            what="rounds after the restart",
        )
        assert {keep.name(), lose.name()} <= {v["vm"] for v in after["vcpus"]}
        assert daemon.thread.is_alive()

        conn = libvirtd.connect()
        lost = conn.lookupByName(lose.name())
        lost.destroy()
        wait_for(lambda: lose.name() not in _vms(state), what="destroyed domain dropped")
        assert keep.name() in _vms(state)
        assert daemon.thread.is_alive()
        # its channel socket went with it; the placeholder comes back, so it can start again
        wait_for(lose_sock.is_socket, what="placeholder socket restored")
        lost.create()
        wait_for(lambda: lose.name() in _vms(state), what="restarted domain seen again")
        conn.close()
    assert daemon.code == 0
    records = [json.loads(line) for line in (state / "decisions.jsonl").read_text().splitlines()]
    assert not [r for r in records if r["kind"] == "failed" and keep.name() in r.get("target", "")]
    source.close()
    assert sock.is_socket()  # the daemon's exit removed it; the placeholder is back
    conn = libvirtd.connect()
    again = conn.lookupByName(keep.name())
    again.destroy()
    again.create()  # libvirt would refuse this without the socket path
    conn.close()


def test_unicache_run_uses_libvirt_pins_through_it_and_restores(
    libvirtd: Libvirtd, make_domain: Any, socket_dir: Path
) -> None:
    dom = make_domain("run", vcpus=2)
    state = socket_dir / "run-state"
    out = subprocess.run(
        [sys.executable, "-c", "from unicache.cli import main; main()", "run", "--connect", URI,
         "--rounds", "3", "--interval", "0.2", "--unify", "l2", "--state-dir", str(state),
         "--always-place"],  # the idle TCG domain weighs nothing: OBS would not pin it
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in (state / "decisions.jsonl").read_text().splitlines()]
    notes = [r["message"] for r in records if r["kind"] == "note"]
    assert any(n.startswith(f"VMs: libvirt domains at {URI}") for n in notes), notes
    pins = {
        r["vcpu"]: r["cpus"] for r in records if r["kind"] == "pin-vcpu" and r["vm"] == dom.name()
    }
    assert sorted(pins) == [0, 1]
    assert any(f"restore: affinity/{dom.name()}/vcpu0: back on cpus" in n for n in notes), notes
    restored = dom.vcpuPinInfo(1)  # VIR_DOMAIN_AFFECT_LIVE: back as it was
    assert all(all(row) for row in restored)
