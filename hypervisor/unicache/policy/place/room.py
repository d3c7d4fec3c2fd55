"""What a host has room for when a VM arrives, and which profile the VM gets (rules 3 and 5
of :mod:`unicache.policy.place.vm`): each LLC group's vCPUs and cache load and each node's
memory, from the VMs already placed; ``auto`` resolved by OBS-X's overweight test.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from unicache.policy.place.options import PlaceOptions, Profile
from unicache.policy.place.types import PlacedVm, VmRequest
from unicache.topology import CacheUnit, Topology, Unify

#: the weight a vCPU is expected to have when nothing is observed (OBS-X needs a number)
DEFAULT_WEIGHT = 1.0


@dataclass(slots=True)
class HostRoom:
    """What the host has and what is taken: the working state of one placement.

    :param units: every cache unit by id.
    :param slots: vCPUs a unit may hold (its CPUs x overcommit).
    :param used: vCPUs on a unit (shares of unpinned vCPUs count as fractions).
    :param load: cache load of a unit (sum of its vCPUs' weights: OBS-X "cache load").
    :param memory: MiB VMs may use on each node.
    :param memory_used: MiB used on each node.
    :param node_units: the units of each node that has CPUs, by id.
    :param socket: the socket of each node.
    :param distances: SLIT distances between nodes.
    """

    units: dict[int, CacheUnit]
    slots: dict[int, float]
    used: dict[int, float]
    load: dict[int, float]
    memory: dict[int, float]
    memory_used: dict[int, float]
    node_units: dict[int, tuple[int, ...]]
    socket: dict[int, int]
    distances: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def room(self, unit: int) -> float:
        """vCPU slots left on a unit."""
        return self.slots[unit] - self.used[unit]

    def free_memory(self, node: int) -> float:
        """MiB left on a node."""
        return self.memory[node] - self.memory_used[node]

    def node_cpus(self, node: int) -> int:
        """CPUs of a node."""
        return sum(len(self.units[u].cpus) for u in self.node_units[node])

    def node_room(self, node: int) -> float:
        """vCPU slots left on a node."""
        return sum(self.room(u) for u in self.node_units[node])

    def node_load(self, node: int) -> float:
        """Cache load per CPU of a node."""
        return sum(self.load[u] for u in self.node_units[node]) / max(1, self.node_cpus(node))


def host_room(
    topology: Topology, unify: Unify, placed: Iterable[PlacedVm], options: PlaceOptions
) -> HostRoom:
    """The host's room for VMs once ``placed`` are on it.

    :param topology: the machine.
    :param unify: what one LLC group is (``llc``: an L3; ``l2``: a core).
    :param placed: the VMs on it.
    :param options: capacity.
    """
    units = {u.id: u for u in topology.units(unify)}
    node_units: dict[int, list[int]] = {}
    for u in units.values():
        node_units.setdefault(u.node, []).append(u.id)
    socket = {
        n.id: min((topology.cpu(c).socket for c in n.cpus), default=0) for n in topology.nodes
    }
    memory = {}
    for n in topology.nodes:
        mib = options.memory_per_node_mib or n.memory_bytes // (1 << 20)
        memory[n.id] = float(max(0, mib - options.memory_reserve_mib))
    room = HostRoom(
        units=units,
        slots={u.id: len(u.cpus) * options.cpu_overcommit for u in units.values()},
        used=dict.fromkeys(units, 0.0),
        load=dict.fromkeys(units, 0.0),
        memory=memory,
        memory_used=dict.fromkeys(memory, 0.0),
        node_units={n: tuple(sorted(us)) for n, us in sorted(node_units.items())},
        socket=socket,
        distances={n.id: n.distances for n in topology.nodes},
    )
    vms = tuple(placed)
    host = _host_weight(vms)
    weights = _FlavorWeights(vms)
    for vm in vms:
        # a vCPU not observed is expected to weigh what its flavor's observed vCPUs weigh,
        # else what the host's do (OBS-X needs a number for every task)
        mine = weights.of(vm)
        fallback = host if mine is None else mine
        for index, covered in enumerate(vm.vcpu_units):
            known = [unit for unit in covered if unit in units]
            if not known:
                continue
            weight = vm.weights[index] if index < len(vm.weights) else None
            for unit in known:
                room.used[unit] += 1.0 / len(known)
                room.load[unit] += (fallback if weight is None else weight) / len(known)
        for node_id, amount in vm.memory_mib:
            if node_id in room.memory_used:
                room.memory_used[node_id] += amount
    return room


def _host_weight(vms: Sequence[PlacedVm]) -> float:
    """The mean observed vCPU weight of the host, or :data:`DEFAULT_WEIGHT` without one."""
    known = [w for vm in vms for w in vm.weights if w is not None]
    mean = sum(known) / len(known) if known else 0.0
    return mean or DEFAULT_WEIGHT


class _FlavorWeights:
    """:func:`flavor_weight` of every placed VM's own flavor, each worked out once.

    A VM's request matches the VMs of its flavor and those of its name; when only VMs of
    its flavor carry its name (as with every caller's unique names) the second adds none,
    so the weight is its flavor's, the same sum in the same order. A name also carried by
    a VM of another flavor takes :func:`flavor_weight` itself. Keeps :func:`host_room`
    linear in the VMs (it is called once per VM a fleet places).
    """

    def __init__(self, vms: Sequence[PlacedVm]) -> None:
        self.vms = vms
        self.by_kind: dict[str, float | None] = {}
        self.flavors_of_name: dict[str, set[str]] = {}
        for vm in vms:
            self.flavors_of_name.setdefault(vm.name, set()).add(vm.flavor)

    def of(self, vm: PlacedVm) -> float | None:
        request = VmRequest(vm.name, 1, flavor=vm.flavor)
        kind = request.kind
        if self.flavors_of_name[vm.name] != {kind}:
            return flavor_weight(self.vms, request)
        if kind not in self.by_kind:
            self.by_kind[kind] = flavor_weight(self.vms, request)
        return self.by_kind[kind]


def flavor_weight(vms: Sequence[PlacedVm], request: VmRequest) -> float | None:
    """The mean observed weight of the vCPUs of VMs of the request's flavor or name."""
    known = [
        w
        for vm in vms
        if vm.flavor == request.kind or vm.name == request.name
        for w in vm.weights
        if w is not None
    ]
    return sum(known) / len(known) if known else None


def resolve_profile(
    request: VmRequest, placed: Sequence[PlacedVm], options: PlaceOptions
) -> tuple[Profile, str]:
    """The profile for a request, with its reason (``auto``: module docstring, rule 3).

    :param request: the VM.
    :param placed: the VMs on the host, with their observed weights.
    :param options: the default profile and what ``auto`` falls back to.
    """
    asked = request.profile or options.profile
    if asked is not Profile.AUTO:
        origin = "asked" if request.profile else "the configured default"
        return asked, f"profile {asked} ({origin})"
    mine = flavor_weight(placed, request)
    known = [w for vm in placed if vm.name != request.name for w in vm.weights if w is not None]
    host = sum(known) / len(known) if known else 0.0
    if mine is None or host <= 0.0:
        return options.auto_default, (
            f"auto: no observed cache weights of flavor {request.kind!r}: "
            f"{options.auto_default} (auto_default)"
        )
    if mine > host:
        return Profile.SPREAD, (
            f"auto: flavor {request.kind!r} vCPUs weigh {mine:.3g} on average, above the "
            f"host's {host:.3g} (OBS-X 'overweight', Policy: Migrating across caches): spread"
        )
    return Profile.COMPACT, (
        f"auto: flavor {request.kind!r} vCPUs weigh {mine:.3g} on average, not above the "
        f"host's {host:.3g}: compact (they gain more from a shared L3 than they evict)"
    )
