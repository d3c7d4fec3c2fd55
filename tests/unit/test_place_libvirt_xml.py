"""A placement in libvirt's terms, without a libvirtd: the fragment, merging it into a
domain's XML, reading it back, the guest-topology probe, the live host's state and the
daemon's [place] config (tests/libvirt/test_libvirt_place.py runs them on a real one)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from unicache.config import load_config
from unicache.errors import ConfigError
from unicache.host.libvirt.domain_xml import parse_domain
from unicache.host.libvirt.placement import (
    apply_to_xml,
    placement_fragment,
    read_metadata,
    request_from_xml,
    topology_support,
)
from unicache.host.placestate import merge_placed, placed_from_status
from unicache.policy.place.options import MemoryMode, PlaceOptions, Profile
from unicache.policy.place.types import PlacedVm, VmRequest
from unicache.policy.place.vm import place_vm
from unicache.topology import Unify

from tests.topologies import TOPO_EPYC_2S, TOPO_HOST_2C

#: what this machine reports (libvirt 9.0.0, QEMU 7.2.22)
HERE = topology_support(9_000_000, 7_002_022)

DOMAIN = """<domain type='qemu'>
  <name>web-1</name>
  <memory unit='GiB'>64</memory>
  <currentMemory unit='GiB'>32</currentMemory>
  <vcpu placement='static' cpuset='0-3'>8</vcpu>
  <cputune><shares>2048</shares><vcpupin vcpu='0' cpuset='5'/></cputune>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model>
    <topology sockets='8' cores='1' threads='1'/><feature policy='require' name='x2apic'/>
  </cpu>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices>
</domain>"""


@pytest.mark.parametrize(("libvirt", "qemu", "dies", "clusters", "says"), [
    (9_000_000, 7_002_022, True, False, "no clusters for x86 (libvirt 9.0.0 has none before "
     "10.1, QEMU 7.2.22 none before 9.0)"),
    (10_001_000, 9_000_000, True, True, "clusters exist too but group L2s"),
    (6_000_000, 7_002_000, False, False, "guest LLC groups as sockets"),
    (None, None, True, False, "QEMU unknown's x86 CPUID shares the L3 per die"),
], ids=["this-host", "libvirt-10.1-qemu-9", "libvirt-6.0", "unknown"])
def test_the_guest_topology_uses_dies_where_libvirt_and_qemu_have_them(
    libvirt: int | None, qemu: int | None, dies: bool, clusters: bool, says: str
) -> None:
    support = topology_support(libvirt, qemu)
    assert (support.dies, support.clusters) == (dies, clusters)
    assert says in support.line and "\n" not in support.line


def test_the_fragment_of_a_compact_vm_on_epyc_pins_one_ccx_with_one_die() -> None:
    p = place_vm(TOPO_EPYC_2S, VmRequest("vm", 8, 65536, Profile.COMPACT))
    xml = placement_fragment(p, HERE)
    assert xml.startswith("<vcpu placement='static'>8</vcpu>\n<cputune>")
    assert "<vcpupin vcpu='7' cpuset='0-7'/>" in xml
    assert "<emulatorpin cpuset='0-7'/>" in xml
    assert "<memory mode='strict' nodeset='0'/>" in xml and "memnode" not in xml
    assert "<topology sockets='1' dies='1' cores='8' threads='1'/>" in xml
    assert "<cache level='3' mode='emulate'/>" in xml and "<numa>" not in xml
    spread = placement_fragment(place_vm(TOPO_EPYC_2S, VmRequest("vm", 8, 65536,
                                                                 Profile.SPREAD)), HERE)
    assert "<vcpupin vcpu='7' cpuset='56-63'/>" in spread
    assert "<topology sockets='1' dies='8' cores='1' threads='1'/>" in spread
    old = placement_fragment(p, topology_support(6_000_000, 7_002_000))
    assert "<topology sockets='1' cores='8' threads='1'/>" in old


def test_the_fragment_of_a_two_node_vm_has_a_cell_and_a_memnode_per_node() -> None:
    p = place_vm(TOPO_EPYC_2S, VmRequest("vm", 96, 524288, Profile.COMPACT),
                 options=PlaceOptions(memory_mode=MemoryMode.RESTRICTIVE))
    xml = placement_fragment(p, HERE)
    assert "<memory mode='restrictive' nodeset='0-1'/>" in xml
    assert "<memnode cellid='0' mode='restrictive' nodeset='0'/>" in xml
    assert "<memnode cellid='1' mode='restrictive' nodeset='1'/>" in xml
    assert "<topology sockets='2' dies='6' cores='8' threads='1'/>" in xml
    assert "<cell id='0' cpus='0-47' memory='262144' unit='MiB'/>" in xml
    assert "<cell id='1' cpus='48-95' memory='262144' unit='MiB'/>" in xml
    assert "<vcpupin vcpu='48' cpuset='64-71'/>" in xml


def test_a_short_last_die_leaves_trailing_slots_offline() -> None:
    p = place_vm(TOPO_EPYC_2S, VmRequest("vm", 12, 1024, Profile.COMPACT))
    xml = placement_fragment(p, HERE)
    assert "<vcpu placement='static' current='12'>16</vcpu>" in xml
    assert "<vcpupin vcpu='15' cpuset='8-15'/>" in xml  # an offline slot, with its die


def test_applying_to_a_domain_keeps_its_cpu_model_and_tunables_and_reads_back() -> None:
    p = place_vm(TOPO_EPYC_2S, request_from_xml(DOMAIN, Profile.SPREAD))
    assert (p.request.name, p.request.vcpus, p.request.memory_mib) == ("web-1", 8, 65536)
    text = apply_to_xml(DOMAIN, p, HERE)
    root = ET.fromstring(text)
    xml = parse_domain(text)
    assert [sorted(c) for _, c in xml.vcpupin] == [[8 * i + j for j in range(8)]
                                                   for i in range(8)]
    assert xml.emulatorpin == frozenset(range(64))
    assert xml.numatune is not None and xml.numatune.nodeset == frozenset({0})
    assert root.findtext("./cputune/shares") == "2048"  # other tunables stay
    assert root.find("./cpu/model") is not None and root.find("./cpu/feature") is not None
    assert root.find("./cpu").get("mode") == "custom"  # type: ignore[union-attr]
    topo = root.findall("./cpu/topology")
    assert len(topo) == 1 and topo[0].get("dies") == "8"
    assert root.find("vcpu").get("cpuset") is None  # type: ignore[union-attr]
    assert read_metadata(root) == p
    again = apply_to_xml(text, p, HERE)
    assert again.count("placement/1") == text.count("placement/1")  # one metadata entry


def test_a_domain_without_unicache_metadata_has_no_placement() -> None:
    assert read_metadata(ET.fromstring(DOMAIN)) is None
    broken = DOMAIN.replace(
        "</domain>", "<metadata><u:placement xmlns:u='https://unicache.org/xmlns/libvirt/"
        "placement/1'>{not json</u:placement></metadata></domain>")
    assert read_metadata(ET.fromstring(broken)) is None


def test_the_daemons_status_gives_the_units_and_weights_of_managed_vcpus() -> None:
    # written at --unify llc (one unit, cpus 0-1), read at --unify l2 (a unit per core)
    status = {
        "unify": "llc", "units": [{"id": 0, "cpus": "0-1"}],
        "vcpus": [{"vm": "web-2", "vcpu": 1, "unit": 0, "cache_weight": 0.5},
                  {"vm": "web-2", "vcpu": 0, "unit": 0, "cache_weight": 0.25},
                  {"vm": "new", "vcpu": 0, "unit": 0, "cache_weight": 9.0}],
    }
    units = TOPO_HOST_2C.units(Unify.L2)
    placed = placed_from_status(status, units, exclude="new")
    assert placed == (PlacedVm("web-2", "web", (frozenset({0, 1}),) * 2, (0.25, 0.5)),)
    pinned = PlacedVm("web-2", "web", (frozenset({0}), frozenset({1})), (), ((0, 512.0),))
    merged = merge_placed(placed, (pinned,))
    assert merged == (PlacedVm("web-2", "web", pinned.vcpu_units, (0.25, 0.5), pinned.memory_mib),)
    with pytest.raises(ConfigError, match="status is malformed"):
        placed_from_status({"vcpus": [{"vm": "x"}]}, units)


def test_the_daemon_config_has_a_place_table(tmp_path: Path) -> None:
    cfg = tmp_path / "unicache.toml"
    cfg.write_text('interval_s = 2\n[place]\ncpu_overcommit = 2.0\nmemory_reserve_mib = 512\n'
                   'profile = "spread"\n')
    assert load_config(cfg).place == PlaceOptions(2.0, 0, 512, profile=Profile.SPREAD)
    assert load_config(None).place == PlaceOptions()
    cfg.write_text("[place]\ncpu_overcommit = 64\n")
    with pytest.raises(ConfigError, match=r"\[place\]: cpu_overcommit must be within 1..16"):
        load_config(cfg)
    cfg.write_text("place = 3\n")
    with pytest.raises(ConfigError, match="'place' must be a table"):
        load_config(cfg)
