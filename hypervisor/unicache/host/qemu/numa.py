"""Guest NUMA layout: ``--numa`` parsed into guest node specs, and how each node is backed.

Guest NUMA nodes may be colored (``--numa 0-1:768/-:256@0-15``): such a node is backed by
``memory-backend-colored`` of the patched QEMU (``make qemu``), else by 2 MiB hugepages with
one line saying so (:mod:`.colored`, docs/coloring.md "QEMU memory backend").
:func:`plan_nodes` decides which, without side effects.

A :class:`GuestNodeSpec` is what unicache's QEMU builds a node from; the daemon's policies
see it as a :class:`unicache.model.GuestNode` (:meth:`GuestNodeSpec.guest_colors`), and the
host's own NUMA nodes are :class:`unicache.topology.NumaNode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from unicache.cpulist import format_list, parse_list
from unicache.errors import ConfigError

#: how a node's memory is backed (``GuestNodeSpec.backing``, decided at start)
BACKING_RAM = "ram"
BACKING_COLORED = "colored"
BACKING_HUGEPAGE = "hugepage"
_BACKINGS = ("", BACKING_RAM, BACKING_COLORED, BACKING_HUGEPAGE)


@dataclass(frozen=True, slots=True)
class GuestNodeSpec:
    """One guest NUMA node as unicache's QEMU builds it: the vCPUs on it (none: a
    memory-only node), its memory, and how that memory is backed.

    :param node: node id (0, 1, ...).
    :param cpus: vCPU indexes on the node.
    :param memory_mib: memory of the node.
    :param colors: host LLC page colors its memory must come from (empty: not colored).
    :param ncolors: the host LLC's colors ``colors`` refer to (0: not known yet; set at start).
    :param backing: how the memory is backed, set at start: ``ram``, ``colored``
        (``memory-backend-colored`` of the patched QEMU) or ``hugepage`` (the fallback:
        2 MiB hugepages, guest colors equal host colors within each 2 MiB page).
    """

    node: int
    cpus: frozenset[int]
    memory_mib: int
    colors: frozenset[int] = frozenset()
    ncolors: int = 0
    backing: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON form: ``{"node": 0, "cpus": "0-1", "memory_mib": 512}``, plus ``colors``,
        ``ncolors`` and ``backing`` when set."""
        out: dict[str, Any] = {"node": self.node, "cpus": format_list(self.cpus),
                               "memory_mib": self.memory_mib}
        if self.colors:
            out["colors"] = format_list(self.colors)
        if self.ncolors:
            out["ncolors"] = self.ncolors
        if self.backing:
            out["backing"] = self.backing
        return out

    @classmethod
    def from_json(cls, obj: object) -> GuestNodeSpec:
        """Parse :meth:`to_json`'s form (records without colors are uncolored nodes).

        :raises ConfigError: when a member is missing or of the wrong type.
        """
        if not isinstance(obj, dict):
            raise ConfigError("a numa node record must be an object")
        node, cpus, mem = obj.get("node"), obj.get("cpus"), obj.get("memory_mib")
        if not isinstance(node, int) or not isinstance(cpus, str) or not isinstance(mem, int):
            raise ConfigError("a numa node record needs node (int), cpus (str), memory_mib (int)")
        colors, ncolors, backing = obj.get("colors", ""), obj.get("ncolors", 0), obj.get(
            "backing", "")
        if not isinstance(colors, str) or not isinstance(ncolors, int) or backing not in _BACKINGS:
            raise ConfigError("a numa node record's colors (str), ncolors (int) or backing "
                              f"({', '.join(b for b in _BACKINGS if b)}) is malformed")
        return cls(node, parse_list(cpus), mem, parse_list(colors), ncolors, str(backing))

    def guest_colors(self) -> frozenset[int]:
        """The host colors the daemon's policies see for this node (``GuestNode.colors``).

        A ``colored`` node: its colors. A ``hugepage`` node: all ``ncolors`` colors (within a
        2 MiB page guest colors equal host colors, so the guest can color it itself; which
        colors its pages hold is not chosen). Any other node: none (not colored).
        """
        if self.backing == BACKING_COLORED:
            return self.colors
        if self.backing == BACKING_HUGEPAGE and self.ncolors:
            return frozenset(range(self.ncolors))
        return frozenset()


def parse_numa(spec: str, vcpus: int, memory_mib: int) -> tuple[GuestNodeSpec, ...]:
    """Parse a guest NUMA layout.

    Grammar: ``node ("/" node)*`` with ``node ::= cpulist ":" MiB ["@" colorlist]``; an empty
    cpulist (or ``-``) is a memory-only node, ``@colorlist`` (e.g. ``@0-15``) builds the
    node's memory from host pages of those LLC page colors. Example for 2 vCPUs and
    1024 MiB with a colored memory-only node: ``0-1:768/-:256@0-15``. With a colored node,
    every node's memory must be a multiple of 2 MiB (hugepage fallback and alignment).

    :param spec: the layout.
    :param vcpus: the VM's vCPU count (every vCPU must be on exactly one node).
    :param memory_mib: the VM's memory (the nodes' memory must add up to it).
    :returns: the nodes, in order (node ids 0, 1, ...).
    :raises ConfigError: on a syntax error or a layout QEMU would refuse.
    """
    nodes: list[GuestNodeSpec] = []
    seen: set[int] = set()
    for i, part in enumerate(spec.strip().split("/")):
        body, at, colors_text = part.strip().partition("@")
        cpus_text, sep, mem_text = body.strip().partition(":")
        if not sep or not mem_text.strip().isdigit():
            raise ConfigError(
                f"numa node {i} {part!r}: expected CPULIST:MIB[@COLORS] (e.g. 0-1:512 or "
                "-:256@0-15)")
        cpus_text = cpus_text.strip()
        cpus = frozenset() if cpus_text in ("", "-") else parse_list(cpus_text)
        colors: frozenset[int] = frozenset()
        if at:
            try:
                colors = parse_list(colors_text.strip())
            except (ConfigError, ValueError) as err:
                raise ConfigError(f"numa node {i}: bad color list {colors_text!r} "
                                  "(e.g. 0-15 or 0,4-7)") from err
            if not colors:
                raise ConfigError(f"numa node {i}: '@' needs colors (e.g. @0-15)")
        bad = sorted(c for c in cpus if c >= vcpus)
        if bad:
            raise ConfigError(f"numa node {i}: vCPU {bad[0]} does not exist ({vcpus} vCPUs)")
        if cpus & seen:
            raise ConfigError(f"numa node {i}: vCPU {min(cpus & seen)} is on two nodes")
        seen |= cpus
        mem = int(mem_text)
        if mem <= 0:
            raise ConfigError(f"numa node {i}: memory must be positive")
        nodes.append(GuestNodeSpec(i, cpus, mem, colors))
    missing = sorted(set(range(vcpus)) - seen)
    if missing:
        raise ConfigError(f"numa layout {spec!r} leaves vCPU {missing[0]} on no node")
    total = sum(n.memory_mib for n in nodes)
    if total != memory_mib:
        raise ConfigError(f"numa layout {spec!r} has {total} MiB, the VM has {memory_mib} MiB")
    if any(n.colors for n in nodes):
        odd = [n for n in nodes if n.memory_mib % 2]
        if odd:
            raise ConfigError(f"numa node {odd[0].node}: {odd[0].memory_mib} MiB is odd; with "
                              "a colored node every node needs a multiple of 2 MiB")
    return tuple(nodes)


def plan_nodes(nodes: Sequence[GuestNodeSpec], colored_backend: bool,
               ncolors: int) -> tuple[GuestNodeSpec, ...]:
    """Decide each node's backing (pure): uncolored nodes ``ram``; colored nodes ``colored``
    when the QEMU has ``memory-backend-colored``, else the ``hugepage`` fallback.

    :param nodes: the nodes.
    :param colored_backend: whether the QEMU offers ``memory-backend-colored``.
    :param ncolors: the host LLC's page colors (0: unknown; the backend probes sysfs).
    :returns: the nodes with ``backing`` (and for colored ones ``ncolors``) set.
    :raises ConfigError: when a node asks for a color the host does not have.
    """
    out = []
    for n in nodes:
        if not n.colors:
            out.append(replace(n, backing=BACKING_RAM, ncolors=0))
            continue
        if ncolors and max(n.colors) >= ncolors:
            raise ConfigError(f"numa node {n.node}: color {max(n.colors)} does not exist "
                              f"(the host LLC has {ncolors} page colors, 0-{ncolors - 1})")
        out.append(replace(n, backing=BACKING_COLORED if colored_backend else BACKING_HUGEPAGE,
                           ncolors=ncolors or n.ncolors))
    return tuple(out)
