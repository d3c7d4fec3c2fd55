"""Placement against the real libvirtd: the fragment starts, virsh reports what it said,
``unicache place --apply`` writes it into a stopped domain, and a booted guest sees the
LLC groups it was given.

This host has 2 CPUs that share one L3 and one NUMA node, so every placement here is
one this host can run: ``--unify l2`` makes each core an LLC group, and a 2-vCPU spread
VM gets a guest with two dies, one per core (the model machines' sockets and CCXs do not
exist here; tests/policy/test_place.py covers them). The guest must run with an Intel
vendor id: QEMU 7.2 under TCG gives ``qemu64`` no ``topoext``, and Linux then puts an AMD
guest's L3 per socket whatever the dies (docs/placement.md "What the guest sees").
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unicache.cpulist import format_list, parse_list
from unicache.host.libvirt.placement import (
    apply_to_xml,
    probe_topology_support,
    read_metadata,
    request_from_xml,
)
from unicache.policy.place.options import MemoryMode, PlaceOptions, Profile
from unicache.policy.place.types import Placement, VmRequest
from unicache.policy.place.vm import place_vm
from unicache.topology import Unify
from unicache.topology.sysfs import discover_topology

from tests.libvirt.conftest import PREFIX, URI, Libvirtd, domain_xml, libvirt, wait_for
from tests.topologies import TOPO_EPYC_2S

#: capacity for these tests: other engineers' domains may run on the same 2 CPUs
OVERCOMMIT = "[place]\ncpu_overcommit = 16.0\n"


def virsh(*args: str) -> str:
    out = subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def virsh_vcpupin(name: str) -> dict[int, frozenset[int]]:
    """``virsh vcpupin NAME``: " 0      0-1" rows under a header."""
    rows = [line.split() for line in virsh("vcpupin", name).splitlines()]
    return {int(r[0]): parse_list(r[1]) for r in rows if len(r) == 2 and r[0].isdigit()}


def virsh_emulatorpin(name: str) -> frozenset[int]:
    """``virsh emulatorpin NAME``: "       *: 0-1"."""
    line = next(ln for ln in virsh("emulatorpin", name).splitlines() if "*:" in ln)
    return parse_list(line.split("*:")[1])


def virsh_numatune(name: str) -> dict[str, str]:
    """``virsh numatune NAME``: "numa_mode      : strict" lines."""
    pairs = [ln.split(":", 1) for ln in virsh("numatune", name).splitlines() if ":" in ln]
    return {k.strip(): v.strip() for k, v in pairs}


def two_cores() -> None:
    if len(discover_topology().units(Unify.L2)) < 2:
        pytest.skip("needs two cores to give the guest two LLC groups")


def spread_on_this_host(xml_text: str) -> Placement:
    """The placement of a domain on this host: --unify l2, spread, as if it were alone."""
    request = request_from_xml(xml_text, Profile.SPREAD)
    return place_vm(discover_topology(), request, (), PlaceOptions(), Unify.L2)


def check_virsh_reports(name: str, p: Placement) -> None:
    pins = virsh_vcpupin(name)
    assert pins == {v.vcpu: v.cpus for v in p.vcpus}
    assert virsh_emulatorpin(name) == p.emulator_cpus
    tune = virsh_numatune(name)
    assert (tune["numa_mode"], parse_list(tune["numa_nodeset"])) == (
        str(p.memory_mode), frozenset(p.nodes))


def test_a_domain_defined_from_the_fragment_starts_and_virsh_reports_it(
    libvirtd: Libvirtd
) -> None:
    two_cores()
    name = f"{PREFIX}-fragment"
    libvirtd.domains.append(name)
    base = domain_xml(name, vcpus=2)
    p = spread_on_this_host(base)
    conn = libvirtd.connect()
    support = probe_topology_support(conn)
    assert support.line.startswith("guest LLC groups as dies")
    dom = conn.defineXML(apply_to_xml(base, p, support))
    try:
        dom.create()
        wait_for(lambda: dom.isActive(), what="the domain to run")
        assert [v.cpus for v in p.vcpus] == [frozenset({0}), frozenset({1})]
        check_virsh_reports(name, p)
        live = ET.fromstring(dom.XMLDesc(0))
        topo = live.find("./cpu/topology")
        assert topo is not None and (topo.get("dies"), topo.get("cores")) == ("2", "1")
        assert live.find("./cpu/cache") is not None
        assert read_metadata(live) == p
        # what QEMU was started with (libvirt logs the command line)
        log = Path(f"/var/log/libvirt/qemu/{name}.log").read_text()
        assert "dies=2" in log and "l3-cache=on" in log
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()
        dom.undefine()
        conn.close()


@pytest.mark.parametrize(("vcpus", "memory", "mode"), [
    (48, 524288, MemoryMode.STRICT),       # two cells, one per socket, a memnode each
    (48, 524288, MemoryMode.RESTRICTIVE),
    (12, 65536, MemoryMode.STRICT),        # 8 + 4 on two CCXs: <vcpu current='12'>16
], ids=["2-cells-strict", "2-cells-restrictive", "short-die"])
def test_libvirt_accepts_the_fragments_of_the_model_machines(
    libvirtd: Libvirtd, vcpus: int, memory: int, mode: MemoryMode
) -> None:
    # defined, not started: this host has one node and two CPUs, not epyc-2s's sockets
    name = f"{PREFIX}-model-{vcpus}-{mode}"
    libvirtd.domains.append(name)
    p = place_vm(TOPO_EPYC_2S, VmRequest(name, vcpus, memory, Profile.COMPACT),
                 options=PlaceOptions(memory_mode=mode))
    conn = libvirtd.connect()
    base = domain_xml(name, vcpus=vcpus).replace(
        "<memory unit='MiB'>64</memory>", f"<memory unit='MiB'>{memory}</memory>")
    dom = conn.defineXML(apply_to_xml(base, p, probe_topology_support(conn)))
    try:
        kept = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
        topo = kept.find("./cpu/topology")
        assert topo is not None and topo.attrib == {
            "sockets": str(p.topology.sockets), "dies": str(p.topology.dies),
            "cores": str(p.topology.cores), "threads": "1"}
        assert kept.find("vcpu").text == str(p.topology.max_vcpus)  # type: ignore[union-attr]
        assert len(kept.findall("./numatune/memnode")) == (2 if len(p.cells) == 2 else 0)
        assert all(m.get("mode") == str(mode) for m in kept.findall("./numatune/*"))
        assert len(kept.findall("./cputune/vcpupin")) == p.topology.max_vcpus
        assert read_metadata(kept) == p
    finally:
        dom.undefine()
        conn.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from unicache.cli import main; main()", *args],
        capture_output=True, text=True, check=False, timeout=120,
    )


def test_place_apply_writes_a_stopped_domain_and_placing_again_keeps_it(
    libvirtd: Libvirtd, tmp_path: Path
) -> None:
    two_cores()
    name = f"{PREFIX}-apply"
    libvirtd.domains.append(name)
    config = tmp_path / "unicache.toml"
    config.write_text(OVERCOMMIT)
    args = ("place", "--apply", name, "--unify", "l2", "--profile", "spread", "--config",
            str(config), "--state-dir", str(tmp_path / "state"), "--json")
    conn = libvirtd.connect()
    dom = conn.defineXML(domain_xml(name, vcpus=2))
    try:
        out = _cli(*args)
        assert out.returncode == 0, out.stderr
        first = json.loads(out.stdout)
        assert first["applied"] == name and first["vcpu_count"] == 2
        inactive = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        kept = read_metadata(ET.fromstring(inactive))
        assert kept is not None and [v.cpus for v in kept.vcpus] == [{0}, {1}]
        assert "<topology sockets='1' dies='2' cores='1' threads='1'/>" in first["libvirt_xml"]
        dom.create()
        check_virsh_reports(name, kept)
        running = _cli(*args)
        assert running.returncode == 2 and f"domain {name} is running" in running.stderr
        dom.destroy()
        again = _cli(*args)
        assert again.returncode == 0, again.stderr
        second = json.loads(again.stdout)
        assert second["reasons"][0].endswith("kept (no oscillation)")
        assert second["vcpus"] == first["vcpus"]
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()
        dom.undefine()
        conn.close()


# Section: a booted guest -----------------------------------------------------------------


@pytest.fixture(scope="module")
def image() -> Any:
    from unicache.host.qemu import ensure_image

    return ensure_image()


@pytest.fixture
def guest_dir() -> Iterator[Path]:
    """A directory QEMU (libvirt-qemu) can reach, for the overlay, console and socket."""
    path = Path(f"/var/tmp/{PREFIX}-guest")
    path.mkdir(mode=0o755, exist_ok=True)
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def guest_xml(name: str, image: Any, where: Path) -> str:
    """The test image booted directly, with the command runner's port; an Intel vendor id
    so that the guest reads its L3 from CPUID leaf 4 (module docstring)."""
    overlay = where / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                    str(image.disk), str(overlay)], check=True)
    overlay.chmod(0o666)
    return f"""<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>512</memory>
  <vcpu placement='static'>2</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{image.kernel}</kernel><initrd>{image.initrd}</initrd>
    <cmdline>console=ttyS0 root=/dev/vda rw quiet panic=-1 unicache.name={name}</cmdline>
  </os>
  <features><acpi/><apic/></features>
  <cpu mode='custom' match='exact'>
    <model fallback='allow' vendor_id='GenuineIntel'>qemu64</model>
  </cpu>
  <on_reboot>destroy</on_reboot>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'><driver name='qemu' type='qcow2'/>
      <source file='{overlay}'><seclabel model='dac' relabel='no'/></source>
      <target dev='vda' bus='virtio'/></disk>
    <controller type='virtio-serial' index='0'/>
    <channel type='unix'><source mode='bind' path='{where / "control.sock"}'/>
      <target type='virtio' name='org.unicache.control.0'/></channel>
    <serial type='file'><source path='{where / "console.log"}'/><target port='0'/></serial>
    <video><model type='none'/></video>
    <memballoon model='none'/>
  </devices>
</domain>"""


#: a booted guest's runner answers in 10-20 s here (TCG, 2 vCPUs); a boot still silent
#: after this has hung, and the domain is booted once more
BOOT_TIMEOUT_S = 180.0


def boot_placed_guest(dom: Any, mux: Any, console: Path) -> str | None:
    """Start ``dom`` and wait for its command runner: None once it answers, else why not
    (the domain stopped, which ``panic=-1`` and ``on_reboot=destroy`` make of a panic, or
    it stayed silent), with the console's telling line."""
    from unicache.host.qemu.control import ping_request
    from unicache.host.qemu.process import boot_failure

    dom.create()
    t0 = time.monotonic()
    while time.monotonic() - t0 < BOOT_TIMEOUT_S:
        if not dom.isActive():
            return f"the domain stopped after {time.monotonic() - t0:.0f} s; " \
                   f"console: {boot_failure(console)}"
        with contextlib.suppress(Exception):
            if mux.call(ping_request(), 2.0):
                print(f"[guest] runner answered after {time.monotonic() - t0:.1f} s")
                return None
        time.sleep(0.2)
    return f"no answer in {BOOT_TIMEOUT_S:.0f} s; console: {boot_failure(console)}"


def test_the_guest_sees_the_llc_groups_the_placement_gave_it(
    libvirtd: Libvirtd, image: Any, guest_dir: Path,
    request: pytest.FixtureRequest,
) -> None:
    from unicache.host.qemu.control import ControlMux, result_of, run_request

    two_cores()
    name = f"{PREFIX}-guest"
    libvirtd.domains.append(name)
    base = guest_xml(name, image, guest_dir)
    p = spread_on_this_host(base)
    conn = libvirtd.connect()
    dom = conn.defineXML(apply_to_xml(base, p, probe_topology_support(conn)))
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    try:
        mux = ControlMux(name, str(guest_dir / "control.sock"))
        failed = boot_placed_guest(dom, mux, guest_dir / "console.log")
        if failed is not None:
            # a TCG boot that hangs or panics says nothing of the placement: the one
            # retry is logged, and a second failure fails the test with both reasons
            if tr is not None:
                tr.write_line(f"[guest] first boot failed ({failed}); booting once more")
            with contextlib.suppress(libvirt.libvirtError):
                dom.destroy()
            again = boot_placed_guest(dom, mux, guest_dir / "console.log")
            assert again is None, f"the guest did not boot twice: {failed}; then {again}"
        check_virsh_reports(name, p)
        script = ("lscpu; for c in /sys/devices/system/cpu/cpu[0-9]*; do echo SHARED "
                  "${c##*cpu} $(cat $c/cache/index3/shared_cpu_list) "
                  "$(cat $c/topology/die_id) $(cat $c/topology/physical_package_id); done")
        res = result_of(["sh"], mux.call(run_request(["sh", "-c", script], None, 60.0), 75.0))
        assert res.ok, res
        if tr is not None:
            tr.write_line("[guest] " + " | ".join(
                ln for ln in res.stdout.splitlines()
                if ln.startswith(("L3", "SHARED", "Socket", "Core", "Vendor"))))
        shared = {int(w[1]): (w[2], int(w[3]), int(w[4])) for w in
                  (ln.split() for ln in res.stdout.splitlines() if ln.startswith("SHARED"))}
        # each die of the placement is one L3 in the guest, holding exactly its vCPUs,
        # and the cell is one package
        for die in p.dies:
            for vcpu in die.vcpus:
                assert shared[vcpu] == (format_list(die.vcpus), die.die, die.cell)
        lscpu = dict(ln.split(":", 1) for ln in res.stdout.splitlines() if ":" in ln)
        assert f"({len(p.dies)} instances)" in lscpu["L3 cache"]
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()
        dom.undefine()
        conn.close()
