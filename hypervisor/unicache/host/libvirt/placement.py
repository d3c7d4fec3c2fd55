"""A placement in libvirt's terms: the domain XML fragment, applying it, and reading it back.

What a placement (:class:`~unicache.policy.place.types.Placement`) becomes in a domain
(https://libvirt.org/formatdomain.html):

* ``<vcpu current=N>MAX</vcpu>`` when the guest topology has trailing offline slots;
* ``<cputune>``: one ``<vcpupin>`` per vCPU slot (its LLC group's CPUs) and
  ``<emulatorpin>`` (section "CPU Tuning");
* ``<numatune>``: ``<memory>`` on the VM's nodes plus one ``<memnode>`` per guest cell
  when there is more than one, in the configured mode, ``strict`` or ``restrictive``
  (section "NUMA Node Tuning"; libvirt accepts ``memnode`` only with guest cells);
* ``<cpu>``: ``<topology sockets dies cores threads>`` with one die per LLC group,
  ``<cache level='3' mode='emulate'/>`` and, with more than one cell, ``<numa><cell>``
  (sections "CPU model and topology", "Guest NUMA topology");
* ``<metadata><unicache:placement>``: the placement as JSON, so that the same VM placed
  again keeps it (no oscillation) and ``unicache place`` sees what unicache placed.

Why dies (:func:`topology_support`, probed from the versions libvirt reports): QEMU's
x86 CPUID shares the L3 among the logical CPUs of a die (leaf 4; leaf 0x8000001D with
``topoext``) up to QEMU 9.1, and by default after it. ``clusters`` exist in libvirt from
10.1 and in QEMU's x86 ``-smp`` from 9.0 (QEMU 7.2 refuses them there: "clusters not
supported by this machine's CPU topology"), and they group L2s (modules), not L3s.
A guest CPU without ``topoext`` under an AMD vendor id (TCG's ``qemu64``) makes Linux put
the L3 per socket whatever the dies; the guest sees its dies' L3s with an Intel vendor id
or, on an AMD host under KVM, with ``topoext`` (host-passthrough).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from unicache.cpulist import format_list
from unicache.errors import ConfigError, ProtocolError, UnicacheError
from unicache.host.libvirt.domain_xml import parse_domain
from unicache.host.placestate import units_covering
from unicache.policy.place.options import MemoryMode, Profile
from unicache.policy.place.types import (
    PlacedVm,
    Placement,
    VmRequest,
    flavor_of,
    placement_from_dict,
    placement_to_dict,
)
from unicache.topology import CacheUnit

#: the XML namespace and prefix of unicache's domain metadata
METADATA_NS = "https://unicache.org/xmlns/libvirt/placement/1"
METADATA_KEY = "unicache"
ET.register_namespace(METADATA_KEY, METADATA_NS)
#: libvirt's VIR_DOMAIN_NUMATUNE_MEM_* values, by mode name
NUMATUNE_MODES = {"strict": 0, "preferred": 1, "interleave": 2, "restrictive": 3}
#: a version as libvirt encodes it: major * 1,000,000 + minor * 1,000 + micro
VersionT = int


def _version(major: int, minor: int, micro: int = 0) -> VersionT:
    return major * 1_000_000 + minor * 1_000 + micro


def version_text(version: VersionT | None) -> str:
    """``9000000`` -> ``"9.0.0"`` (``"unknown"`` for ``None``)."""
    if version is None:
        return "unknown"
    return f"{version // 1_000_000}.{version // 1_000 % 1_000}.{version % 1_000}"


@dataclass(frozen=True, slots=True)
class TopologySupport:
    """What the host's libvirt and QEMU let the guest topology say.

    :param libvirt_version: libvirt's version, if known.
    :param qemu_version: QEMU's version, if known.
    :param dies: ``<topology dies>`` works (libvirt >= 6.1, QEMU >= 4.1).
    :param clusters: ``<topology clusters>`` works on x86 (libvirt >= 10.1, QEMU >= 9.0).
    :param line: one line saying which was used and why.
    """

    libvirt_version: VersionT | None
    qemu_version: VersionT | None
    dies: bool
    clusters: bool
    line: str


def topology_support(libvirt_version: VersionT | None,
                     qemu_version: VersionT | None) -> TopologySupport:
    """Decide how the guest's LLC groups are described (module docstring).

    :param libvirt_version: libvirt's version (``None``: unknown, assumed recent).
    :param qemu_version: QEMU's version (``None``: unknown, assumed recent).
    """
    lv, qv = version_text(libvirt_version), version_text(qemu_version)
    dies = ((libvirt_version is None or libvirt_version >= _version(6, 1))
            and (qemu_version is None or qemu_version >= _version(4, 1)))
    clusters = (libvirt_version is not None and libvirt_version >= _version(10, 1)
                and qemu_version is not None and qemu_version >= _version(9, 0))
    if not dies:
        return TopologySupport(
            libvirt_version, qemu_version, False, False,
            f"guest LLC groups as sockets: libvirt {lv} / QEMU {qv} have no dies "
            "(libvirt 6.1+, QEMU 4.1+); QEMU then puts the L3 per socket")
    why_not = ("clusters exist too but group L2s (modules), not L3s" if clusters else
               f"no clusters for x86 (libvirt {lv} has none before 10.1, QEMU {qv} none "
               "before 9.0)")
    return TopologySupport(
        libvirt_version, qemu_version, True, clusters,
        f"guest LLC groups as dies: QEMU {qv}'s x86 CPUID shares the L3 per die (leaf 4, "
        f"0x8000001D with topoext); {why_not}")


def probe_topology_support(conn: Any | None = None) -> TopologySupport:
    """:func:`topology_support` for this host: from libvirt when connected, else from
    ``virsh --version`` and ``qemu-system-x86_64 --version``."""
    libvirt_version = qemu_version = None
    if conn is not None:
        with contextlib.suppress(Exception):
            libvirt_version = int(conn.getLibVersion())
        with contextlib.suppress(Exception):
            qemu_version = int(conn.getVersion())
    if libvirt_version is None:
        libvirt_version = _tool_version(["virsh", "--version"])
    if qemu_version is None:
        qemu_version = _tool_version(["qemu-system-x86_64", "--version"])
    return topology_support(libvirt_version, qemu_version)


def _tool_version(argv: list[str]) -> VersionT | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    if found is None:
        return None
    return _version(int(found[1]), int(found[2]), int(found[3] or 0))


# Section: the fragment ---------------------------------------------------------------------


def _elements(p: Placement, support: TopologySupport) -> list[ET.Element]:
    """The placement's elements, in the order the fragment prints them."""
    n, topo = p.request.vcpus, p.topology
    vcpu = ET.Element("vcpu", placement="static")
    if topo.max_vcpus != n:
        vcpu.set("current", str(n))
    vcpu.text = str(topo.max_vcpus)
    cputune = ET.Element("cputune")
    for pin in p.vcpus:
        ET.SubElement(cputune, "vcpupin", vcpu=str(pin.vcpu), cpuset=format_list(pin.cpus))
    ET.SubElement(cputune, "emulatorpin", cpuset=format_list(p.emulator_cpus))
    numatune = ET.Element("numatune")
    mode = str(p.memory_mode)
    ET.SubElement(numatune, "memory", mode=mode, nodeset=format_list(p.nodes))
    cells = len(p.cells) > 1 and all(c.memory_mib > 0 for c in p.cells)
    if cells:
        for c in p.cells:
            ET.SubElement(numatune, "memnode", cellid=str(c.id), mode=mode, nodeset=str(c.node))
    cpu = ET.Element("cpu")
    if support.dies:
        ET.SubElement(cpu, "topology", sockets=str(topo.sockets), dies=str(topo.dies),
                      cores=str(topo.cores), threads=str(topo.threads))
    else:
        ET.SubElement(cpu, "topology", sockets=str(topo.sockets * topo.dies),
                      cores=str(topo.cores), threads=str(topo.threads))
    ET.SubElement(cpu, "cache", level="3", mode="emulate")
    if cells:
        numa = ET.SubElement(cpu, "numa")
        for c in p.cells:
            ET.SubElement(numa, "cell", id=str(c.id), cpus=format_list(c.vcpus),
                          memory=str(c.memory_mib), unit="MiB")
    return [vcpu, cputune, numatune, cpu]


def placement_fragment(p: Placement, support: TopologySupport) -> str:
    """The XML to put into a domain's definition (``virsh edit``) for the placement."""
    parts = []
    for element in _elements(p, support):
        ET.indent(element, "  ")
        parts.append(ET.tostring(element, encoding="unicode"))
    return "\n".join(parts).replace('"', "'").replace(" />", "/>")


def metadata_xml(p: Placement, namespaced: bool = True) -> str:
    """The ``<unicache:placement>`` metadata element (the placement as JSON).

    :param namespaced: with its namespace (in a domain XML); without, for
        ``virDomainSetMetadata``, which adds it from its ``uri`` argument.
    """
    element = ET.Element(f"{{{METADATA_NS}}}placement" if namespaced else "placement")
    element.text = json.dumps(placement_to_dict(p), separators=(",", ":"))
    return ET.tostring(element, encoding="unicode")


def read_metadata(root: ET.Element) -> Placement | None:
    """The placement unicache recorded in a domain's XML, if any (``None`` when absent or
    unreadable: a placement made anew is then recorded over it)."""
    found = root.find(f"./metadata/{{{METADATA_NS}}}placement")
    if found is None or not found.text:
        return None
    try:
        return placement_from_dict(json.loads(found.text))
    except (ValueError, KeyError, TypeError, UnicacheError):
        return None


def apply_to_xml(text: str, p: Placement, support: TopologySupport) -> str:
    """A domain's XML with the placement in it; everything else kept.

    ``<vcpu>``, the pins of ``<cputune>`` (its other tunables stay), ``<numatune>`` and the
    topology, cache and NUMA cells of ``<cpu>`` (its mode, model and features stay) are
    replaced; per-vCPU ``<vcpus>`` states are dropped (``current`` says which are online).

    :raises ProtocolError: when the XML does not parse.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ProtocolError("domain XML does not parse", "bad-xml") from err
    vcpu, cputune, numatune, cpu = _elements(p, support)
    _replace(root, "vcpu", vcpu)
    for old in root.findall("vcpus"):
        root.remove(old)
    tune = root.find("cputune")
    if tune is None:
        root.append(cputune)
    else:
        for old in [*tune.findall("vcpupin"), *tune.findall("emulatorpin")]:
            tune.remove(old)
        tune.extend(list(cputune))
    _replace(root, "numatune", numatune)
    own = root.find("cpu")
    if own is None:
        root.append(cpu)
    else:
        for tag in ("topology", "cache", "numa"):
            for old in own.findall(tag):
                own.remove(old)
        own.extend(list(cpu))
    metadata = root.find("metadata")
    if metadata is None:
        metadata = ET.SubElement(root, "metadata")
    for old in metadata.findall(f"{{{METADATA_NS}}}placement"):
        metadata.remove(old)
    metadata.append(ET.fromstring(metadata_xml(p)))
    return ET.tostring(root, encoding="unicode")


def _replace(root: ET.Element, tag: str, new: ET.Element) -> None:
    old = root.find(tag)
    if old is None:
        root.append(new)
        return
    index = list(root).index(old)
    root.remove(old)
    root.insert(index, new)


def request_from_xml(text: str, profile: Profile | None = None) -> VmRequest:
    """The request a defined domain makes: its name, online vCPUs and ``<memory>``.

    :raises ProtocolError: when the XML is not a domain.
    """
    xml = parse_domain(text)
    mem = ET.fromstring(text).find("memory")
    mib = xml.memory_bytes // (1 << 20)
    if mem is not None:
        factor = _MEM_UNITS.get((mem.get("unit") or "KiB").lower())
        if factor is None or not (mem.text or "").strip().isdigit():
            raise ProtocolError("domain XML: bad <memory>", "bad-xml")
        mib = int((mem.text or "0").strip()) * factor // (1 << 20)
    return VmRequest(xml.name, xml.vcpus, mib, profile)


#: libvirt's binary memory units
_MEM_UNITS = {"b": 1, "bytes": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
              "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40}


# Section: what runs, and applying a placement ----------------------------------------------


def _cpumap_set(cpumap: Sequence[bool]) -> frozenset[int]:
    return frozenset(i for i, on in enumerate(cpumap) if on)


def placed_from_libvirt(conn: Any, units: Sequence[CacheUnit], exclude: str | None = None
                        ) -> tuple[PlacedVm, ...]:
    """The running domains of a libvirt connection, as placement sees them.

    vCPUs count on the units their live pins cover (an unpinned vCPU a share on each);
    memory on the ``<numatune>`` nodes, evenly (all nodes when there is none).

    :param conn: an open connection.
    :param units: the cache units placement uses.
    :param exclude: the domain being placed.
    """
    from unicache.host.libvirt.binding import libvirt

    nodes = sorted({u.node for u in units})
    out = []
    for dom in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE):
        try:
            name = dom.name()
            if name == exclude:
                continue
            text = dom.XMLDesc(0)
            xml = parse_domain(text)
            pins = dom.vcpuPinInfo(libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except (libvirt.libvirtError, ProtocolError):
            continue  # it stopped meanwhile, or its XML is not one unicache reads
        covered = tuple(units_covering(units, _cpumap_set(m)) for m in pins[: xml.vcpus])
        where = sorted(xml.numatune.nodeset) if xml.numatune and xml.numatune.nodeset else nodes
        mib = xml.memory_bytes / (1 << 20)
        memory = tuple((node, mib / len(where)) for node in where) if where else ()
        out.append(PlacedVm(name, flavor_of(name), covered, (), memory,
                            read_metadata(ET.fromstring(text))))
    return tuple(out)


def apply_to_defined(
    conn: Any, domain: str, place: Callable[[VmRequest], Placement],
    support: TopologySupport, profile: Profile | None = None,
) -> Placement:
    """Put a placement into a defined, stopped domain's persistent XML (``place --apply``).

    :param conn: an open connection.
    :param domain: the domain's name.
    :param place: computes the placement for the domain's request.
    :param support: what the guest topology may say.
    :param profile: the request's profile (``None``: the configured default).
    :raises ConfigError: when the domain does not exist or runs.
    """
    from unicache.host.libvirt.binding import libvirt

    try:
        dom = conn.lookupByName(domain)
        if dom.isActive():
            raise ConfigError(
                f"domain {domain} is running: --apply changes a stopped domain's definition "
                "(the libvirt hook places domains as they start)")
        text = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    except libvirt.libvirtError as err:
        raise ConfigError(f"no defined domain {domain}") from err
    placement = place(request_from_xml(text, profile))
    try:
        conn.defineXML(apply_to_xml(text, placement, support))
    except libvirt.libvirtError as err:
        raise UnicacheError(f"libvirt refused the placement of {domain}: {err}") from err
    return placement


@dataclass(frozen=True, slots=True)
class LiveApplied:
    """What :func:`apply_live` changed.

    :param vcpus: the vCPUs pinned.
    :param memory: what happened to the memory nodes (one line).
    :param guest: what happened to the guest topology (one line).
    """

    vcpus: tuple[int, ...]
    memory: str
    guest: str


def apply_live(dom: Any, p: Placement, vcpus: int, mode: MemoryMode) -> LiveApplied:
    """Pin a running domain where ``p`` says, live and in its persistent definition.

    vCPUs and emulator: ``pinVcpuFlags``/``pinEmulator`` with LIVE|CONFIG, so the XML says
    what runs. Memory: ``<numatune>`` nodeset and mode in the definition; live, the nodeset
    (libvirt moves a running domain's memory only in strict or restrictive mode). The
    guest's topology and cells cannot change while it runs: they take
    ``unicache place --apply`` on the stopped domain. The placement is recorded in the
    domain's metadata (live and persistent).

    :param dom: the running domain.
    :param p: the placement.
    :param vcpus: the domain's vCPUs (pins beyond them are skipped).
    :param mode: the memory mode for the definition.
    :raises libvirt.libvirtError: when a pin is refused.
    """
    from unicache.host.libvirt.binding import libvirt

    both = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG
    ncpus = int(dom.connect().getCPUMap()[0])

    def cpumap(cpus: frozenset[int]) -> tuple[bool, ...]:
        return tuple(i in cpus for i in range(ncpus))

    pinned = []
    for pin in p.vcpus:
        if pin.vcpu < vcpus:
            dom.pinVcpuFlags(pin.vcpu, cpumap(pin.cpus), both)
            pinned.append(pin.vcpu)
    dom.pinEmulator(cpumap(p.emulator_cpus), both)
    nodeset = format_list(p.nodes)
    dom.setNumaParameters({"numa_mode": NUMATUNE_MODES[str(mode)], "numa_nodeset": nodeset},
                          libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    try:
        dom.setNumaParameters({"numa_nodeset": nodeset}, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        memory = f"nodes {nodeset}, live and in the definition ({mode})"
    except libvirt.libvirtError as err:
        memory = (f"nodes {nodeset} in the definition ({mode}); not live: "
                  f"{err.get_error_message()}")
    dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata_xml(p, False), METADATA_KEY,
                    METADATA_NS, both)
    guest = ("guest topology and cells unchanged while it runs (`unicache place --apply "
             f"{dom.name()}` on the stopped domain sets them)")
    return LiveApplied(tuple(pinned), memory, guest)
