"""The libvirt backend against a real libvirtd: discovery, pinning, attach, events, restarts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from unicache.errors import ConfigError
from unicache.host.libvirt import choose
from unicache.host.libvirt.actuator import LibvirtActuator
from unicache.host.libvirt.channel import attach_channel, make_placeholder_socket
from unicache.host.libvirt.choose import choose_vm_source
from unicache.host.libvirt.domain_xml import parse_domain
from unicache.host.libvirt.source import LibvirtVmSource
from unicache.host.live import LiveHost
from unicache.model import PinVcpu, VcpuId

from tests.libvirt.conftest import URI, Libvirtd, wait_for

VCPU_COMM = re.compile(r"^CPU (\d+)/(TCG|KVM)$")


def _affinity_from_proc(tid: int) -> str:
    for line in Path(f"/proc/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split()[1]
    raise AssertionError(f"no Cpus_allowed_list for {tid}")


def _vcpuinfo_affinity(name: str) -> dict[int, str]:
    out = subprocess.run(["virsh", "-c", URI, "vcpuinfo", name], capture_output=True,
                         text=True, check=True).stdout
    vcpus = [int(v) for v in re.findall(r"^VCPU:\s+(\d+)", out, re.M)]
    masks = re.findall(r"^CPU Affinity:\s+(\S+)", out, re.M)
    return dict(zip(vcpus, masks, strict=True))


@pytest.fixture
def source(libvirtd: Libvirtd) -> Any:
    src = LibvirtVmSource(URI, reconnect_interval_s=0.2)
    src.connect()
    yield src
    src.close()


def _vm(source: LibvirtVmSource, name: str) -> Any:
    found = [vm for vm in source.running() if vm.name == name]
    return found[0] if found else None


def test_discovery_finds_threads_channel_numa_of_a_running_domain(
    source: LibvirtVmSource, make_domain: Any, tmp_path: Path
) -> None:
    sock = tmp_path / "agent.sock"
    make_placeholder_socket(sock)  # libvirt refuses to start without the path
    dom = make_domain("disc", vcpus=2, channel=sock, numa=True)
    vm = _vm(source, dom.name())
    assert vm is not None
    assert sorted(vm.vcpu_threads) == [0, 1]
    for index, tid in vm.vcpu_threads.items():
        comm = Path(f"/proc/{tid}/comm").read_text().strip()
        match = VCPU_COMM.match(comm)
        assert match is not None and int(match.group(1)) == index
        assert Path(f"/proc/{vm.pid}/task/{tid}").exists()  # threads of the QEMU process
    assert vm.agent_socket == sock
    assert vm.memory_bytes == 64 * 1024 * 1024
    xml = source.domain_xml(dom.name())
    assert xml is not None
    assert [(c.id, sorted(c.vcpus)) for c in xml.cells] == [(0, [0]), (1, [1])]
    assert xml.numatune is not None and xml.numatune.nodeset == frozenset({0})
    assert xml.numatune.mode == "strict"
    # the guest's nodes reach the policies (NCC replicates across them)
    assert [(n.node, sorted(n.vcpus), n.colors) for n in vm.nodes] == [
        (0, [0], frozenset()), (1, [1], frozenset())
    ]


def test_pinning_goes_through_libvirt_and_is_restored(
    source: LibvirtVmSource, make_domain: Any, tmp_path: Path
) -> None:
    dom = make_domain("pin", vcpus=2)
    vm = _vm(source, dom.name())
    actuator = LibvirtActuator(tmp_path / "journal.json", source)
    tid = vm.vcpu_threads[1]
    actuator.set_affinity(f"affinity/{dom.name()}/vcpu1", tid, {1})
    assert os.sched_getaffinity(tid) == {1}
    assert _affinity_from_proc(tid) == "1"
    assert _vcpuinfo_affinity(dom.name()) == {0: "yy", 1: "-y"}
    assert source.vcpu_pins(dom.name())[1] == {1}
    # the emulator moved away from the pinned vCPU
    assert source.emulator_pins(dom.name()) == {0}
    assert {p.key for p in actuator.pending} == {
        f"affinity/{dom.name()}/vcpu1", f"emulator/{dom.name()}"
    }
    # a release (OBS steps aside) puts that one vCPU back, and the emulator with it
    line = actuator.restore(f"affinity/{dom.name()}/vcpu1")
    assert "back on cpus (0, 1) (libvirt)" in line, line
    assert _vcpuinfo_affinity(dom.name()) == {0: "yy", 1: "yy"}
    assert source.emulator_pins(dom.name()) == {0, 1}
    assert os.sched_getaffinity(tid) == {0, 1}
    assert actuator.pending == ()
    actuator.set_affinity(f"affinity/{dom.name()}/vcpu1", tid, {1})
    assert _vcpuinfo_affinity(dom.name()) == {0: "yy", 1: "-y"}
    # a crash: a new actuator finds the journal and restores through libvirt
    recovered = LibvirtActuator(tmp_path / "journal.json", source)
    lines = recovered.restore_all()
    assert any("back on cpus (0, 1) (libvirt)" in line for line in lines), lines
    assert _vcpuinfo_affinity(dom.name()) == {0: "yy", 1: "yy"}
    assert source.emulator_pins(dom.name()) == {0, 1}
    assert os.sched_getaffinity(tid) == {0, 1}
    assert recovered.pending == ()
    assert LibvirtActuator(tmp_path / "journal.json", source).pending == ()


def test_attach_adds_the_channel_persistently_and_live_once(
    libvirtd: Libvirtd, make_domain: Any, source: LibvirtVmSource
) -> None:
    dom = make_domain("attach", vcpus=1)
    first = attach_channel(URI, dom.name())
    assert (first.persistent, first.live, first.mode) == ("added", "added", "bind")
    # QEMU listens on a socket of its own user that libvirt made; the daemon is told to
    # dial it
    vm = _vm(source, dom.name())
    assert (vm.agent_socket, vm.agent_listens) == (first.socket, True)
    assert first.socket is not None and first.socket.is_socket()
    assert first.socket.stat().st_uid == os.stat(f"/proc/{vm.pid}").st_uid
    conn = libvirtd.connect()
    again = conn.lookupByName(dom.name())
    for flags in (0, 2):  # live, then VIR_DOMAIN_XML_INACTIVE
        text = again.XMLDesc(flags)
        assert text.count("name='org.unicache.agent.0'") == 1
        assert parse_domain(text).agent_mode == "bind"  # inactive: no <source>, libvirt's
    out = subprocess.run(
        [sys.executable, "-c", "from unicache.cli import main; main()", "attach",
         dom.name(), "--json"],
        capture_output=True, text=True, check=True,
    )
    second = json.loads(out.stdout)
    assert (second["persistent"], second["live"]) == ("present", "present")
    assert second["socket"] == str(first.socket)
    assert again.XMLDesc(0).count("name='org.unicache.agent.0'") == 1
    # the persistent definition survives a restart with the channel, without any daemon
    again.destroy()
    again.create()
    assert "org.unicache.agent.0" in again.XMLDesc(0)
    conn.close()


def test_attach_names_an_unknown_domain_in_one_line(libvirtd: Libvirtd) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from unicache.cli import main; main()", "attach",
         "uctest-no-such-domain"],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("unicache: error: no domain 'uctest-no-such-domain'")
    assert "Traceback" not in out.stderr


def test_lifecycle_events_report_start_and_destroy(
    source: LibvirtVmSource, make_domain: Any
) -> None:
    dom = make_domain("events", vcpus=1)
    name = dom.name()
    wait_for(lambda: any(e.vm == name and e.kind == "started"
                         for e in source.drain_events()), what="started event")
    assert _vm(source, name) is not None
    dom.destroy()
    seen: list[Any] = []

    def stopped() -> bool:
        seen.extend(e for e in source.drain_events() if e.vm == name)
        return any(e.kind == "stopped" for e in seen)

    wait_for(stopped, what="stopped event")
    assert [(e.kind, e.detail) for e in seen if e.kind == "stopped"] == [("stopped", "destroyed")]
    assert _vm(source, name) is None


class _NoPerf:
    def read(self, tid: int) -> None:
        return None

    def forget(self, tid: int) -> None:
        return None

    def close(self) -> None:
        return None


def test_live_host_survives_libvirtd_restart_and_a_destroyed_domain(
    libvirtd: Libvirtd, source: LibvirtVmSource, make_domain: Any, tmp_path: Path
) -> None:
    keep = make_domain("keep", vcpus=2)
    lose = make_domain("lose", vcpus=1)
    actuator = LibvirtActuator(tmp_path / "journal.json", source)
    host = LiveHost(source, _NoPerf(), actuator, None, None, list)
    obs = host.observe()
    names = {vm.name for vm in obs.vms}
    assert {keep.name(), lose.name()} <= names
    pin = PinVcpu(VcpuId(keep.name(), 0), frozenset({0}), 0, "test")
    lose_pin = PinVcpu(VcpuId(lose.name(), 0), frozenset({1}), 1, "test")
    assert host.act([pin, lose_pin]).failed == ()

    libvirtd.stop()
    # libvirtd is gone: the VMs still run and stay known, actions fail (and are retried)
    during = host.observe()
    assert {keep.name(), lose.name()} <= {vm.name for vm in during.vms}
    moved = PinVcpu(VcpuId(keep.name(), 1), frozenset({1}), 1, "test")
    assert len(host.act([moved]).failed) == 1
    libvirtd.start()

    def reconnected() -> Any:
        obs = host.observe()
        return obs if source.reconnects >= 1 else None

    after = wait_for(reconnected, what="reconnect")
    assert {keep.name(), lose.name()} <= {vm.name for vm in after.vms}
    assert host.act([moved]).failed == ()
    assert _vcpuinfo_affinity(keep.name()) == {0: "y-", 1: "-y"}

    source.drain_events()
    conn = libvirtd.connect()
    conn.lookupByName(lose.name()).destroy()
    conn.close()
    # events flow again on the new connection
    wait_for(lambda: [e for e in source.drain_events()
                      if (e.vm, e.kind) == (lose.name(), "stopped")], what="stopped event")
    gone = host.observe()
    assert lose.name() not in {vm.name for vm in gone.vms}
    assert f"affinity/{lose.name()}/vcpu0" not in {p.key for p in actuator.pending}
    lines = actuator.restore_all()
    assert _vcpuinfo_affinity(keep.name()) == {0: "yy", 1: "yy"}, lines


def test_choose_vm_source_prefers_a_reachable_libvirtd(libvirtd: Libvirtd, tmp_path: Path) -> None:
    source, why = choose_vm_source(None, tmp_path)
    assert isinstance(source, LibvirtVmSource)
    assert why.startswith(f"VMs: libvirt domains at {URI}")
    source.close()


def test_choose_vm_source_falls_back_without_libvirtd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"qemu+unix:///system?socket={tmp_path}/none.sock"
    with pytest.raises(ConfigError, match="cannot connect to libvirt"):
        choose_vm_source(uri, tmp_path)  # an explicit --connect must work or fail
    monkeypatch.setattr(choose, "DEFAULT_URI", uri)
    source, why = choose_vm_source(None, tmp_path)
    assert not isinstance(source, LibvirtVmSource)
    assert why.startswith("VMs: ") and f"no libvirtd at {uri}" in why


def test_attach_says_in_one_line_when_live_attach_is_impossible(
    libvirtd: Libvirtd, make_domain: Any
) -> None:
    dom = make_domain("noctl", vcpus=1, serial_controller=False)
    result = attach_channel(URI, dom.name())
    assert result.persistent == "added"
    assert result.live.startswith("impossible: ") and "virtio-serial" in result.live
    assert "org.unicache.agent.0" not in dom.XMLDesc(0)
    inactive = dom.XMLDesc(2)  # VIR_DOMAIN_XML_INACTIVE: libvirt added the controller itself
    assert "org.unicache.agent.0" in inactive and "type='virtio-serial'" in inactive
    dom.destroy()
    dom.create()  # the next start has the channel
    assert "org.unicache.agent.0" in dom.XMLDesc(0)
