"""The values of VM placement: a request, the VMs already placed, and the placement itself.

Pure, frozen values for :mod:`unicache.policy.place.vm` (the rules, OBS-X "Policy:
Migrating across caches" and the Kubernetes CPU manager's uncore-cache alignment) and
:mod:`unicache.policy.place.fleet`, with their dict form: what ``unicache place --json``
prints and what a domain's ``<metadata>`` keeps, so that a placement read back is the
placement made (:func:`placement_from_dict` inverts :func:`placement_to_dict`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from unicache.cpulist import format_list, parse_list
from unicache.policy.place.options import MemoryMode, Profile

#: a trailing instance number: "web-3" and "web_12" are of flavor "web"
_INDEX = re.compile(r"[-_.]?\d+$")


def flavor_of(name: str) -> str:
    """The flavor of a VM known only by its name: the name without a trailing index.

    >>> flavor_of("web-3"), flavor_of("db_12"), flavor_of("cache")
    ('web', 'db', 'cache')
    """
    stripped = _INDEX.sub("", name)
    return stripped or name


@dataclass(frozen=True, slots=True)
class VmRequest:
    """A VM to place.

    :param name: its name (unique on the host).
    :param vcpus: its vCPUs.
    :param memory_mib: its memory (0: not known; no memory is planned then).
    :param profile: compact, spread or auto (``None``: the options' default).
    :param flavor: its flavor (empty: :func:`flavor_of` its name).
    """

    name: str
    vcpus: int
    memory_mib: int = 0
    profile: Profile | None = None
    flavor: str = ""

    @property
    def kind(self) -> str:
        """The flavor, given or from the name."""
        return self.flavor or flavor_of(self.name)


@dataclass(frozen=True, slots=True)
class GuestTopology:
    """The guest's ``<cpu><topology>``: one socket per guest NUMA cell, one die per LLC group.

    QEMU 7.2's x86 CPUID describes the L3 as shared by a die (leaf 4, and leaf 0x8000001D
    with ``topoext``), so dies are the guest's LLC groups.
    """

    sockets: int
    dies: int
    cores: int
    threads: int = 1

    @property
    def max_vcpus(self) -> int:
        """vCPU slots the topology describes (>= the VM's vCPUs; the rest start offline)."""
        return self.sockets * self.dies * self.cores * self.threads


@dataclass(frozen=True, slots=True)
class DiePlacement:
    """One guest die: the LLC group (cache unit) that holds its vCPUs.

    :param cell: its guest cell (= socket).
    :param die: its index in the cell.
    :param unit: the host cache unit.
    :param cpus: the unit's CPUs: where the die's vCPUs run.
    :param vcpus: the online vCPUs on it.
    :param reason: why this unit.
    """

    cell: int
    die: int
    unit: int
    cpus: frozenset[int]
    vcpus: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class CellPlacement:
    """One guest NUMA cell: one host node.

    :param id: the guest cell id.
    :param node: the host NUMA node.
    :param vcpus: its vCPU slots (online and offline).
    :param memory_mib: its memory.
    :param reason: why this node and this memory.
    """

    id: int
    node: int
    vcpus: frozenset[int]
    memory_mib: int
    reason: str


@dataclass(frozen=True, slots=True)
class VcpuPin:
    """Where one vCPU runs.

    :param vcpu: its index.
    :param unit: its cache unit (the die's).
    :param cpus: the unit's CPUs.
    :param online: whether it is one of the VM's vCPUs (``False``: a slot the guest
        topology needs, offline at start, pinned with its die for a later hot-plug).
    :param reason: why.
    """

    vcpu: int
    unit: int
    cpus: frozenset[int]
    online: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a VM goes, every decision with its reason.

    :param request: what was asked (flavor resolved).
    :param profile: the profile used (``auto`` resolved).
    :param cells: guest NUMA cells, one per host node, by id.
    :param dies: guest dies, by cell then die.
    :param vcpus: every vCPU slot of the guest topology, by index.
    :param emulator_cpus: where QEMU's other threads run.
    :param topology: the guest's CPU topology.
    :param memory_mode: the ``<numatune>`` mode.
    :param reasons: the decisions in order (nodes, profile, groups, memory, guest).
    :param reason: one line for the whole placement.
    """

    request: VmRequest
    profile: Profile
    cells: tuple[CellPlacement, ...]
    dies: tuple[DiePlacement, ...]
    vcpus: tuple[VcpuPin, ...]
    emulator_cpus: frozenset[int]
    topology: GuestTopology
    memory_mode: MemoryMode
    reasons: tuple[str, ...]
    reason: str

    @property
    def nodes(self) -> tuple[int, ...]:
        """The host nodes, in cell order."""
        return tuple(c.node for c in self.cells)

    @property
    def units(self) -> tuple[int, ...]:
        """The cache units of the dies, in die order."""
        return tuple(d.unit for d in self.dies)

    def online(self) -> tuple[VcpuPin, ...]:
        """The pins of the VM's own vCPUs (not the offline slots)."""
        return tuple(v for v in self.vcpus if v.online)


@dataclass(frozen=True, slots=True)
class PlacedVm:
    """A VM already on the host, as placement sees it.

    :param name: its name.
    :param flavor: its flavor (:func:`flavor_of` when only the name is known).
    :param vcpu_units: per vCPU, the cache units its cpuset covers; a vCPU covering
        several counts an equal share on each (an unpinned vCPU is somewhere in its set).
    :param weights: per vCPU, its observed cache weight (OBS "cache weight"; ``None``:
        not observed); shorter than ``vcpu_units`` when only some are known.
    :param memory_mib: (node, MiB) it uses.
    :param placement: the placement unicache made for it, if it did (kept when the same
        VM is placed again).
    """

    name: str
    flavor: str
    vcpu_units: tuple[frozenset[int], ...]
    weights: tuple[float | None, ...] = ()
    memory_mib: tuple[tuple[int, float], ...] = ()
    placement: Placement | None = None


def placed_from(placement: Placement, weight: float | None = None) -> PlacedVm:
    """The :class:`PlacedVm` a placement makes (its online vCPUs and its memory).

    :param placement: what :func:`unicache.policy.place.vm.place_vm` returned.
    :param weight: the cache weight observed for each of its vCPUs, if any.
    """
    online = placement.online()
    return PlacedVm(
        placement.request.name,
        placement.request.kind,
        tuple(frozenset({v.unit}) for v in online),
        tuple(weight for _ in online) if weight is not None else (),
        tuple((c.node, float(c.memory_mib)) for c in placement.cells if c.memory_mib),
        placement,
    )


# Section: the dict form ------------------------------------------------------------------


def placement_to_dict(p: Placement) -> dict[str, Any]:
    """The placement as JSON-ready data (``unicache place --json``, domain metadata)."""
    return {
        "name": p.request.name,
        "flavor": p.request.kind,
        "vcpu_count": p.request.vcpus,
        "memory_mib": p.request.memory_mib,
        "requested_profile": None if p.request.profile is None else str(p.request.profile),
        "profile": str(p.profile),
        "nodes": list(p.nodes),
        "memory_mode": str(p.memory_mode),
        "topology": {
            "sockets": p.topology.sockets,
            "dies": p.topology.dies,
            "cores": p.topology.cores,
            "threads": p.topology.threads,
            "max_vcpus": p.topology.max_vcpus,
        },
        "cells": [
            {
                "id": c.id,
                "node": c.node,
                "vcpus": format_list(c.vcpus),
                "memory_mib": c.memory_mib,
                "reason": c.reason,
            }
            for c in p.cells
        ],
        "dies": [
            {
                "cell": d.cell,
                "die": d.die,
                "unit": d.unit,
                "cpus": format_list(d.cpus),
                "vcpus": format_list(d.vcpus),
                "reason": d.reason,
            }
            for d in p.dies
        ],
        "vcpus": [
            {
                "vcpu": v.vcpu,
                "unit": v.unit,
                "cpus": format_list(v.cpus),
                "online": v.online,
                "reason": v.reason,
            }
            for v in p.vcpus
        ],
        "emulator_cpus": format_list(p.emulator_cpus),
        "reasons": list(p.reasons),
        "reason": p.reason,
    }


def placement_from_dict(data: Mapping[str, Any]) -> Placement:
    """Read back what :func:`placement_to_dict` wrote.

    :raises KeyError, TypeError, ValueError: when a member is missing or mistyped (the
        caller names the source; :class:`~unicache.errors.ConfigError` from the CPU lists).
    """
    topo = data["topology"]
    requested = data.get("requested_profile")
    request = VmRequest(
        str(data["name"]),
        int(data["vcpu_count"]),
        int(data["memory_mib"]),
        None if requested is None else Profile(requested),
        str(data.get("flavor", "")),
    )
    return Placement(
        request=request,
        profile=Profile(data["profile"]),
        cells=tuple(
            CellPlacement(
                int(c["id"]),
                int(c["node"]),
                parse_list(c["vcpus"]),
                int(c["memory_mib"]),
                str(c["reason"]),
            )
            for c in data["cells"]
        ),
        dies=tuple(
            DiePlacement(
                int(d["cell"]),
                int(d["die"]),
                int(d["unit"]),
                parse_list(d["cpus"]),
                tuple(sorted(parse_list(d["vcpus"]))),
                str(d["reason"]),
            )
            for d in data["dies"]
        ),
        vcpus=tuple(
            VcpuPin(
                int(v["vcpu"]),
                int(v["unit"]),
                parse_list(v["cpus"]),
                bool(v["online"]),
                str(v["reason"]),
            )
            for v in data["vcpus"]
        ),
        emulator_cpus=parse_list(data["emulator_cpus"]),
        topology=GuestTopology(
            int(topo["sockets"]), int(topo["dies"]), int(topo["cores"]), int(topo["threads"])
        ),
        memory_mode=MemoryMode(data["memory_mode"]),
        reasons=tuple(str(r) for r in data["reasons"]),
        reason=str(data["reason"]),
    )
