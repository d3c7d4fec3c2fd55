"""Placement of a new VM: its NUMA nodes, LLC groups, vCPU pins, memory and guest topology.

The rules, in the order they decide (docs/placement.md says the same for operators):

1. **NUMA-aligned.** A VM that fits one node — its vCPUs on the node's CPUs and its
   memory in the node's free memory — stays in that node (CPUs and memory).
2. **Fewest nodes.** A VM larger than every node (or than what any node has left) gets
   the fewest nodes that hold it, on the fewest sockets at the smallest SLIT distance,
   with one guest NUMA cell per host node and its vCPUs and memory split evenly.
3. **Inside a node, by profile:**

   * *compact* fills whole LLC groups, lowest-loaded free groups first, and puts the
     remainder on the group it fits most exactly: the Kubernetes CPU manager's uncore-cache
     alignment (``prefer-align-cpus-by-uncorecache``, ``cpu_assignment.go``
     ``takeFullUncoreCaches`` then the exact-size partial group "to avoid excessive
     fragmentation"), for VMs whose vCPUs share data;
   * *spread* puts the vCPUs on the node's lightest LLC groups by cache load, OBS-X's rule
     for a new task (os-observations-multicore.md, "Policy: Migrating across caches": "When
     a new task is created, OBS-X looks for the LLC group with the smallest cache load"),
     for cache-heavy independent vCPUs;
   * *auto* is spread when the observed cache weights of the VMs of the same flavor (or
     name) are above the host's average — OBS-X's "overweight" test ("a task is overweight
     if its cache weight is greater than the average weight"), at the flavor's level —
     and compact otherwise; without observed weights of the flavor, the configured default.

4. **The guest sees its LLC groups.** The vCPUs fill a regular grid, cells x dies x
   cores: every die (one LLC group) holds the same number of vCPUs except the last one,
   so ``<topology sockets=cells dies=groups cores=per-group>`` describes the placement
   exactly; a short last die leaves trailing offline vCPU slots (``<vcpu current=N>``).
5. **Capacity.** An LLC group holds at most ``cpu_overcommit`` vCPUs per CPU, all VMs
   together, and one VM never puts more of its vCPUs on a group than it has CPUs (a VM
   does not overcommit itself); a node gives VMs its memory (or ``memory_per_node_mib``)
   less ``memory_reserve_mib``. A VM that does not fit is refused
   (:class:`~unicache.errors.PolicyRefusal`), never placed badly.
6. **No oscillation.** A VM placed again with the same size and profile keeps the
   placement it has (the Kubernetes static policy's ``Allocate`` returns a container's
   existing assignment); its own load never pushes it elsewhere.

Pure: no I/O, no clock; the same inputs give the same placement.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from unicache.cpulist import format_list
from unicache.errors import PolicyRefusal
from unicache.policy.place.options import PlaceOptions, Profile
from unicache.policy.place.room import HostRoom, host_room, resolve_profile
from unicache.policy.place.types import (
    CellPlacement,
    DiePlacement,
    GuestTopology,
    PlacedVm,
    Placement,
    VcpuPin,
    VmRequest,
)
from unicache.topology import Topology, Unify

#: the most node sets of one size tried (a 16-node host has 12,870 sets of 8); they are
#: tried best first (fewest sockets, shortest distance), so the cut drops only poor ones
MAX_NODE_SETS = 512
#: how a reason says that a VM kept its placement (rule 6)
KEPT = "kept (no oscillation)"
#: the largest VM placed (libvirt's own limit for a QEMU domain is 4096 vCPUs)
MAX_VCPUS = 4096


# Section: the layout of one node set -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Die:
    cell: int
    die: int
    unit: int
    count: int
    reason: str


@dataclass(frozen=True, slots=True)
class _Layout:
    nodes: tuple[int, ...]
    dies_per_cell: int
    per_die: int
    shares: tuple[int, ...]
    dies: tuple[_Die, ...]
    memory: tuple[int, ...]
    score: tuple[Any, ...]


def _pick(
    room: HostRoom, node: int, needs: Sequence[int], profile: Profile
) -> list[tuple[int, int, str]] | None:
    """Units of one node for dies of ``needs`` vCPUs each (full dies first, the short one
    last), each with its reason; ``None`` when the node cannot hold them."""
    taken: set[int] = set()
    out: list[tuple[int, int, str]] = []
    for need in needs:
        fits = [
            u
            for u in room.node_units[node]
            if u not in taken and len(room.units[u].cpus) >= need and room.room(u) >= need - 1e-9
        ]
        if not fits:
            return None
        whole = [u for u in fits if len(room.units[u].cpus) == need and room.used[u] < 1e-9]
        if profile is Profile.SPREAD:
            # sort keys: cache load (OBS-X: the smallest), vCPUs per CPU there, unit id
            unit = min(
                fits,
                key=lambda u: (round(room.load[u], 9), room.used[u] / len(room.units[u].cpus), u),
            )
            why = (
                f"spread (OBS-X, Policy: Migrating across caches): lightest LLC group "
                f"{unit} of node {node} for {_n(need, 'vCPU')} "
                f"(cache load {room.load[unit]:.3g}, {room.used[unit]:g} vCPUs on "
                f"{len(room.units[unit].cpus)} cpus)"
            )
        elif whole:
            # sort keys: cache load, unit id (k8s takeFullUncoreCaches: free uncore caches)
            unit = min(whole, key=lambda u: (round(room.load[u], 9), u))
            why = (
                f"compact (k8s uncore-cache alignment, takeFullUncoreCaches): whole free "
                f"LLC group {unit} of node {node} for {_n(need, 'vCPU')}"
            )
        else:
            # sort keys: the vCPUs per CPU above one it would leave there (with
            # cpu_overcommit > 1 the closest fit by slots is the busiest group: never
            # stack vCPUs on a group's CPUs while another group has CPUs to spare, as
            # OBS-X keeps to units with a CPU to spare), room left after it (k8s: the
            # exact-size uncore cache "to avoid excessive fragmentation"), cache load, id
            def fit(u: int, need: int = need) -> tuple[float, float, float, int]:
                cpus = len(room.units[u].cpus)
                over = max(0.0, room.used[u] + need - cpus) / cpus
                return (round(over, 9), round(room.room(u) - need, 9), round(room.load[u], 9), u)

            unit = min(fits, key=fit)
            stacked = fit(unit)[0] > 0
            why = (
                f"compact (k8s uncore-cache alignment): {_n(need, 'vCPU')} on LLC group {unit} "
                f"of node {node}, the closest fit ({room.room(unit) - need:g} of "
                f"{room.slots[unit]:g} slots left after them"
                + (", the least overcommitted: no group has CPUs to spare)" if stacked else ")")
            )
        taken.add(unit)
        out.append((unit, need, why))
    return out


def _layout(
    room: HostRoom, nodes: tuple[int, ...], n: int, memory_mib: int, profile: Profile
) -> _Layout | None:
    """The regular grid (module docstring, rule 4) of ``n`` vCPUs on ``nodes``, if any."""
    k = len(nodes)
    q = math.ceil(n / k)
    largest = max(len(room.units[u].cpus) for node in nodes for u in room.node_units[node])
    top = min(largest, q)
    if profile is Profile.SPREAD:
        groups = min(
            sum(1 for u in room.node_units[node] if room.room(u) >= 1 - 1e-9) for node in nodes
        )
        first = min(top, math.ceil(q / max(1, groups)))
        sizes: Iterable[int] = range(first, top + 1)
    else:
        sizes = range(top, 0, -1)
    for m in sizes:
        d = math.ceil(q / m)
        full = d * m
        shares = tuple([full] * (k - 1) + [n - (k - 1) * full])
        if shares[-1] <= 0:
            continue
        dies: list[_Die] = []
        for cell, (node, share) in enumerate(zip(nodes, shares, strict=True)):
            if share > room.node_cpus(node) or share > room.node_room(node) + 1e-9:
                break
            needs = [m] * (share // m) + ([share % m] if share % m else [])
            picked = _pick(room, node, needs, profile)
            if picked is None:
                break
            # guest die order: the full dies by unit id, the short one last
            ordered = sorted(picked[: share // m], key=lambda p: p[0]) + picked[share // m :]
            dies += [_Die(cell, i, u, c, why) for i, (u, c, why) in enumerate(ordered)]
        else:
            split = _split_memory(room, nodes, shares, memory_mib)
            if split is None:
                return None
            return _Layout(nodes, d, m, shares, tuple(dies), split, ())
    return None


def _split_memory(
    room: HostRoom, nodes: tuple[int, ...], shares: tuple[int, ...], memory_mib: int
) -> tuple[int, ...] | None:
    """MiB per cell: in proportion to its vCPUs, topped up where a node has room."""
    if memory_mib <= 0:
        return tuple(0 for _ in nodes)
    n = sum(shares)
    want = [memory_mib * s // n for s in shares]
    want[0] += memory_mib - sum(want)
    free = [math.floor(room.free_memory(node)) for node in nodes]
    give = [min(w, f) for w, f in zip(want, free, strict=True)]
    short = memory_mib - sum(give)
    # water-filling: what a full node cannot take goes to the others, in cell order
    for i in range(len(nodes)):
        extra = min(short, free[i] - give[i])
        give[i] += extra
        short -= extra
    return None if short > 0 else tuple(give)


def _score(room: HostRoom, layout: _Layout, profile: Profile) -> tuple[Any, ...]:
    nodes = layout.nodes
    sockets = len({room.socket[n] for n in nodes})
    distance = sum(
        room.distances[a][b] if b < len(room.distances[a]) else 0
        for a, b in itertools.combinations(nodes, 2)
    )
    load = round(sum(room.node_load(n) for n in nodes), 9)
    if profile is Profile.SPREAD:
        # sort keys: sockets, distance, cache load per CPU (OBS-X), more groups, node ids
        return (sockets, distance, load, -len(layout.dies), nodes)
    # sort keys: sockets, distance, fewest groups, cache load per CPU, node ids
    return (sockets, distance, len(layout.dies), load, nodes)


# Section: the placement ----------------------------------------------------------------------


def place_vm(
    topology: Topology,
    request: VmRequest,
    placed: Sequence[PlacedVm] = (),
    options: PlaceOptions | None = None,
    unify: Unify = Unify.LLC,
) -> Placement:
    """Place a VM (module docstring: the rules).

    :param topology: the machine.
    :param request: the VM: name, vCPUs, memory, profile, flavor.
    :param placed: the VMs already on the machine, with their observed cache weights.
    :param options: capacity and defaults (``None``: :class:`PlaceOptions` defaults).
    :param unify: what one LLC group is: ``llc`` (an L3) or ``l2`` (a core: the only way
        to have more than one group on a single-L3 machine).
    :returns: the placement, every decision with its reason.
    :raises PolicyRefusal: ``CPUS_EXHAUSTED``, ``MEMORY_EXHAUSTED`` or ``LLC_FRAGMENTED``
        when the VM does not fit; the message is one line with what is free.
    """
    options = options or PlaceOptions()
    if not 1 <= request.vcpus <= MAX_VCPUS or request.memory_mib < 0:
        raise PolicyRefusal(
            f"cannot place {request.name}: {request.vcpus} vCPUs and {request.memory_mib} MiB "
            f"(vCPUs must be within 1..{MAX_VCPUS}, memory not negative)",
            PolicyRefusal.CPUS_EXHAUSTED,
        )
    profile, profile_reason = resolve_profile(request, placed, options)
    for vm in placed:
        kept = vm.placement
        if vm.name == request.name and kept is not None and _same(kept.request, request):
            return replace(
                kept,
                reasons=(
                    f"{request.name} is placed already with this size and profile: {KEPT}",
                    *(r for r in kept.reasons if not r.endswith(KEPT)),
                ),
            )
    others = [vm for vm in placed if vm.name != request.name]
    room = host_room(topology, unify, others, options)
    layout, k = _best_layout(room, request, profile)
    if layout is None:
        raise _refusal(room, request)
    return _assemble(room, request, profile, profile_reason, layout, k, options)


def _same(a: VmRequest, b: VmRequest) -> bool:
    return (a.vcpus, a.memory_mib, a.profile, a.kind) == (b.vcpus, b.memory_mib, b.profile, b.kind)


def _best_layout(
    room: HostRoom, request: VmRequest, profile: Profile
) -> tuple[_Layout | None, int]:
    nodes = tuple(room.node_units)
    for k in range(1, len(nodes) + 1):
        sets = [
            s
            for s in itertools.combinations(nodes, k)
            if sum(room.node_cpus(n) for n in s) >= request.vcpus
            and sum(room.node_room(n) for n in s) >= request.vcpus - 1e-9
            and sum(room.free_memory(n) for n in s) >= request.memory_mib
        ]
        # sort keys: sockets spanned, SLIT distance, cache load, node ids
        sets.sort(
            key=lambda s: (
                len({room.socket[n] for n in s}),
                sum(
                    room.distances[a][b] if b < len(room.distances[a]) else 0
                    for a, b in itertools.combinations(s, 2)
                ),
                round(sum(room.node_load(n) for n in s), 9),
                s,
            )
        )
        best: _Layout | None = None
        for s in sets[:MAX_NODE_SETS]:
            found = _layout(room, s, request.vcpus, request.memory_mib, profile)
            if found is None:
                continue
            found = replace(found, score=_score(room, found, profile))
            if best is None or found.score < best.score:
                best = found
        if best is not None:
            return best, k
    return None, 0


def _refusal(room: HostRoom, request: VmRequest) -> PolicyRefusal:
    nodes = tuple(room.node_units)
    slots = sum(max(0.0, room.node_room(n)) for n in nodes)
    memory = sum(max(0.0, room.free_memory(n)) for n in nodes)
    cpus = sum(room.node_cpus(n) for n in nodes)
    what = (
        f"cannot place {request.name} ({request.vcpus} vCPUs, {request.memory_mib} MiB): "
        f"the host has {slots:g} vCPU slots and {memory:g} MiB free "
        f"({cpus} CPUs on {len(nodes)} nodes)"
    )
    if slots < request.vcpus - 1e-9 or cpus < request.vcpus:
        return PolicyRefusal(what, PolicyRefusal.CPUS_EXHAUSTED)
    if memory < request.memory_mib:
        return PolicyRefusal(what, PolicyRefusal.MEMORY_EXHAUSTED)
    return PolicyRefusal(
        f"{what}, but no LLC groups with room for equal dies", PolicyRefusal.LLC_FRAGMENTED
    )


def _assemble(
    room: HostRoom,
    request: VmRequest,
    profile: Profile,
    profile_reason: str,
    layout: _Layout,
    k: int,
    options: PlaceOptions,
) -> Placement:
    n = request.vcpus
    d, m = layout.dies_per_cell, layout.per_die
    topo = GuestTopology(sockets=k, dies=d, cores=m)
    per_cell = d * m
    pins, dies = _pins(room, n, layout, topo)
    node_reason = _node_reason(room, request, layout, k)
    cells = tuple(
        CellPlacement(
            i,
            node,
            frozenset(range(i * per_cell, min((i + 1) * per_cell, topo.max_vcpus))),
            layout.memory[i],
            f"cell {i}: {layout.shares[i]} vCPUs and {layout.memory[i]} MiB on node {node} "
            f"({options.memory_mode})",
        )
        for i, node in enumerate(layout.nodes)
    )
    emulator = frozenset().union(*(room.units[x.unit].cpus for x in layout.dies if x.cell == 0))
    guest = (
        f"guest topology {_n(k, 'socket')} x {_n(d, 'die')} x {_n(m, 'core')} x 1 thread: "
        "one die per LLC group, so the guest's L3 groups are the host's"
        + (
            ""
            if topo.max_vcpus == n
            else f" ({topo.max_vcpus - n} trailing vCPU slots offline: <vcpu current='{n}'>)"
        )
    )
    emulator_reason = (
        f"emulator threads on cpus {format_list(emulator)}: the LLC groups of cell 0, beside "
        "the vCPUs whose data they move"
    )
    reasons = (
        node_reason,
        profile_reason,
        *(x.reason for x in layout.dies),
        *(c.reason for c in cells),
        emulator_reason,
        guest,
    )
    units = ",".join(str(x.unit) for x in layout.dies)
    summary = (
        f"{n} vCPUs and {request.memory_mib} MiB on node{'s' if k > 1 else ''} "
        f"{format_list(layout.nodes)}, {profile} over LLC group{'s' if len(dies) > 1 else ''} "
        f"{units}; guest {k}x{d}x{m}"
    )
    return Placement(
        request=replace(request, flavor=request.kind),
        profile=profile,
        cells=cells,
        dies=dies,
        vcpus=tuple(pins),
        emulator_cpus=emulator,
        topology=topo,
        memory_mode=options.memory_mode,
        reasons=reasons,
        reason=summary,
    )


def _pins(
    room: HostRoom, n: int, layout: _Layout, topo: GuestTopology
) -> tuple[list[VcpuPin], tuple[DiePlacement, ...]]:
    """Every slot of the guest topology pinned to its die's LLC group (the first ``n``
    online), and each die with the online vCPUs it holds."""
    per_cell = topo.dies * topo.cores
    m = topo.cores
    # the die of each slot; slots of a die with no unit (a short last cell) go with the
    # last die of their cell
    by_slot = {(die.cell, die.die): die for die in layout.dies}
    pins: list[VcpuPin] = []
    online: dict[tuple[int, int], list[int]] = {}
    for v in range(topo.max_vcpus):
        cell, die = v // per_cell, (v % per_cell) // m
        place = by_slot.get((cell, die)) or max(
            (x for x in layout.dies if x.cell == cell), key=lambda x: x.die
        )
        if v < n:
            online.setdefault((place.cell, place.die), []).append(v)
        reason = (
            place.reason
            if v < n
            else (
                f"offline slot of the guest topology, pinned with die {place.die} of cell {cell} "
                "for a later hot-plug"
            )
        )
        pins.append(VcpuPin(v, place.unit, room.units[place.unit].cpus, v < n, reason))
    dies = tuple(
        DiePlacement(
            x.cell,
            x.die,
            x.unit,
            room.units[x.unit].cpus,
            tuple(online.get((x.cell, x.die), ())),
            x.reason,
        )
        for x in layout.dies
    )
    return pins, dies


def _node_reason(room: HostRoom, request: VmRequest, layout: _Layout, k: int) -> str:
    """Why these nodes: one that holds the VM, or the fewest that do."""
    n = request.vcpus
    if k == 1:
        node = layout.nodes[0]
        node_reason = (
            f"NUMA-aligned: node {node} holds all {n} vCPUs and {request.memory_mib} MiB "
            f"({room.node_room(node):g} vCPU slots on {room.node_cpus(node)} cpus, "
            f"{room.free_memory(node):g} MiB free)"
        )
    else:
        node_reason = (
            f"no single node holds {n} vCPUs and {request.memory_mib} MiB: the fewest nodes, "
            f"{k} ({format_list(layout.nodes)}, on "
            f"{len({room.socket[x] for x in layout.nodes})} socket(s)), one guest cell each"
        )
    return node_reason


def _n(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"
