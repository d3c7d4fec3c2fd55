"""libvirt domain XML and QMP replies checked at the boundary and turned into typed values.

Pure: no libvirt connection here. :func:`parse_domain` reads what unicache needs from a
domain's XML (format: https://libvirt.org/formatdomain.html): the driver type, vCPU
count, memory, the unicache agent channel (section "Channel"), ``<numatune>`` (section
"NUMA Node Tuning"), the guest NUMA cells (``<cpu><numa><cell>``, section "Guest NUMA
topology") and the ``<cputune>`` pinning. :func:`agent_channel_xml` builds the channel
``unicache attach`` adds, :func:`parse_query_cpus_fast` checks QEMU's reply (QMP schema,
``query-cpus-fast``: a list of ``CpuInfoFast`` with ``cpu-index`` and ``thread-id``).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from unicache.cpulist import parse_list
from unicache.errors import ConfigError, ProtocolError

#: the virtio-serial port name the guest agent looks for (docs/protocol.md "Transport")
AGENT_PORT_NAME = "org.unicache.agent.0"
#: bytes in a KiB, MiB, GiB ... for libvirt's memory units
_UNITS = {
    "b": 1, "bytes": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1 << 20, "mib": 1 << 20,
    "mb": 1000**2, "g": 1 << 30, "gib": 1 << 30, "gb": 1000**3, "t": 1 << 40, "tib": 1 << 40,
    "tb": 1000**4,
}


@dataclass(frozen=True, slots=True)
class NumaCell:
    """One guest NUMA cell (``<cpu><numa><cell>``).

    :param id: the guest node id.
    :param vcpus: the guest vCPUs in it (empty for a memory-only cell).
    :param memory_bytes: its memory.
    """

    id: int
    vcpus: frozenset[int]
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class NumaTune:
    """The domain's ``<numatune><memory>``: where libvirt puts its memory on the host.

    :param mode: ``strict``, ``preferred``, ``interleave`` or ``restrictive``.
    :param nodeset: host nodes (empty when placement is ``auto``).
    :param placement: ``static`` or ``auto``.
    """

    mode: str
    nodeset: frozenset[int]
    placement: str


@dataclass(frozen=True, slots=True)
class DomainXml:
    """What unicache reads from a domain's XML.

    :param name: the domain name.
    :param uuid: its UUID.
    :param driver: the ``<domain type=...>`` (``kvm``, ``qemu``, ``xen``).
    :param vcpus: vCPUs (``<vcpu current=...>`` when set, else the maximum).
    :param memory_bytes: current memory.
    :param agent_socket: the unix socket of the unicache agent channel, if any (a bind-mode
        channel has one only in the live XML: libvirt picks it at start).
    :param agent_mode: that channel's source mode (``bind``: QEMU listens, unicache dials;
        ``connect``: unicache listens), ``None`` without the channel.
    :param numatune: ``<numatune><memory>``, if any.
    :param cells: guest NUMA cells.
    :param vcpupin: configured ``<vcpupin>`` cpusets by vCPU.
    :param emulatorpin: configured ``<emulatorpin>`` cpuset, if any.
    :param has_virtio_serial: whether a virtio-serial controller is present.
    """

    name: str
    uuid: str
    driver: str
    vcpus: int
    memory_bytes: int
    agent_socket: Path | None
    agent_mode: str | None
    numatune: NumaTune | None
    cells: tuple[NumaCell, ...]
    vcpupin: tuple[tuple[int, frozenset[int]], ...]
    emulatorpin: frozenset[int] | None
    has_virtio_serial: bool


def _bytes(value: str | None, unit: str | None) -> int:
    if value is None:
        return 0
    factor = _UNITS.get((unit or "KiB").lower())
    if factor is None or not value.strip().isdigit():
        raise ProtocolError(f"domain XML: bad memory value {value!r} {unit!r}", "bad-xml")
    return int(value) * factor


def _cpus(text: str | None, where: str) -> frozenset[int]:
    # libvirt's cpuset syntax is unicache's list syntax plus "^N" exclusions ("0-7,^3")
    items = [i.strip() for i in (text or "").split(",") if i.strip()]
    try:
        excluded = parse_list(",".join(i[1:] for i in items if i.startswith("^")))
        return parse_list(",".join(i for i in items if not i.startswith("^"))) - excluded
    except ConfigError as err:
        raise ProtocolError(f"domain XML: bad cpuset {text!r} in {where}", "bad-xml") from err


def find_agent_channel(root: ET.Element) -> ET.Element | None:
    """The ``<channel type='unix'>`` whose target name is :data:`AGENT_PORT_NAME`."""
    for chan in root.findall("./devices/channel"):
        target = chan.find("target")
        if (
            chan.get("type") == "unix"
            and target is not None
            and target.get("name") == AGENT_PORT_NAME
        ):
            return chan
    return None


def parse_domain(text: str) -> DomainXml:
    """Parse a domain's XML (``virDomainGetXMLDesc``).

    :param text: the XML.
    :returns: the typed view.
    :raises ProtocolError: kind ``bad-xml`` when it is not a domain or a value is malformed.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ProtocolError("domain XML does not parse", "bad-xml") from err
    if root.tag != "domain":
        raise ProtocolError(f"expected <domain>, got <{root.tag}>", "bad-xml")
    name = root.findtext("name")
    if not name:
        raise ProtocolError("'domain' XML requires a 'name' element", "bad-xml")
    vcpu = root.find("vcpu")
    vcpu_text = (vcpu.get("current") or vcpu.text or "1") if vcpu is not None else "1"
    if not vcpu_text.strip().isdigit():
        raise ProtocolError(f"domain XML: bad vcpu count {vcpu_text!r}", "bad-xml")
    mem = root.find("currentMemory")
    if mem is None:
        mem = root.find("memory")
    memory = 0 if mem is None else _bytes(mem.text, mem.get("unit"))
    chan = find_agent_channel(root)
    source = None if chan is None else chan.find("source")
    path = None if source is None else source.get("path")
    numatune = None
    tune = root.find("./numatune/memory")
    if tune is not None:
        numatune = NumaTune(
            tune.get("mode", "strict"),
            _cpus(tune.get("nodeset"), "numatune"),
            tune.get("placement", "static"),
        )
    cells = tuple(
        NumaCell(
            int(cell.get("id", str(i))),
            _cpus(cell.get("cpus"), "numa cell"),
            _bytes(cell.get("memory"), cell.get("unit")),
        )
        for i, cell in enumerate(root.findall("./cpu/numa/cell"))
    )
    pins = tuple(
        sorted(
            (int(pin.get("vcpu", "-1")), _cpus(pin.get("cpuset"), "vcpupin"))
            for pin in root.findall("./cputune/vcpupin")
        )
    )
    epin = root.find("./cputune/emulatorpin")
    return DomainXml(
        name=name,
        uuid=root.findtext("uuid") or "",
        driver=root.get("type", ""),
        vcpus=int(vcpu_text),
        memory_bytes=memory,
        agent_socket=Path(path) if path else None,
        agent_mode=None if chan is None else
        ("bind" if source is None else source.get("mode", "bind")),
        numatune=numatune,
        cells=cells,
        vcpupin=pins,
        emulatorpin=None if epin is None else _cpus(epin.get("cpuset"), "emulatorpin"),
        has_virtio_serial=any(
            c.get("type") == "virtio-serial" for c in root.findall("./devices/controller")
        ),
    )


def agent_channel_xml() -> str:
    """The ``<channel>`` ``unicache attach`` adds: QEMU listens, unicache dials.

    ``mode='bind'`` without a path, as libvirt's own guest-agent channel: libvirt makes
    the socket in its channel directory at each start (the path appears in the live XML),
    owned by QEMU's user, and the daemon dials it (``ChannelServer.connect_vm``). So the
    root daemon never creates, chowns or replaces a file where QEMU could reach, no
    placeholder is needed for a domain to start without the daemon, and the daemon may
    restart freely (it dials again).
    """
    return (
        "<channel type='unix'><source mode='bind'/>"
        f"<target type='virtio' name={quoteattr(AGENT_PORT_NAME)}/>"
        "</channel>"
    )


def add_agent_channel(text: str) -> str:
    """The domain XML with the agent channel (and a virtio-serial controller) added.

    :param text: the persistent domain XML.
    :returns: the new XML; unchanged semantics when the channel is already there.
    :raises ProtocolError: when the XML does not parse.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ProtocolError("domain XML does not parse", "bad-xml") from err
    devices = root.find("devices")
    if devices is None:
        devices = ET.SubElement(root, "devices")
    if find_agent_channel(root) is None:
        devices.append(ET.fromstring(agent_channel_xml()))
    return ET.tostring(root, encoding="unicode")


def parse_query_cpus_fast(reply: str) -> dict[int, int]:
    """vCPU index -> host thread id from a ``query-cpus-fast`` reply.

    :param reply: the JSON text ``qemuMonitorCommand`` returned.
    :raises ProtocolError: kind ``bad-qmp`` naming the missing or mistyped member.
    """
    try:
        data = json.loads(reply)
    except ValueError as err:
        raise ProtocolError("'query-cpus-fast' reply is not JSON", "bad-qmp") from err
    if not isinstance(data, dict) or not isinstance(data.get("return"), list):
        raise ProtocolError("'query-cpus-fast' reply requires a 'return' list", "bad-qmp")
    threads: dict[int, int] = {}
    for cpu in data["return"]:
        if not isinstance(cpu, dict):
            raise ProtocolError("'CpuInfoFast' must be an object", "bad-qmp")
        for member in ("cpu-index", "thread-id"):
            value = cpu.get(member)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ProtocolError(f"'CpuInfoFast' requires an integer '{member}'", "bad-qmp")
        threads[cpu["cpu-index"]] = cpu["thread-id"]
    return threads
