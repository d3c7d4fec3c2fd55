"""Where a density point's VMs go before it runs: which VMs the host admits, ``unicache
place``'s placement, and where Linux's fork balancing starts each vCPU."""

from __future__ import annotations

from collections.abc import Sequence

from unicache.policy.place.fleet import Arrival, place_fleet
from unicache.policy.place.options import PlaceOptions, Profile
from unicache.policy.place.types import VmRequest
from unicache.topology import Topology, Unify

from unicache_sim.density.tenants import Flavor
from unicache_sim.engine.config import SimConfig

MIB = 1024 * 1024



def vm_names(flavors: Sequence[Flavor]) -> tuple[str, ...]:
    """VM names in arrival order: FLAVOR-1, FLAVOR-2, ... per flavor."""
    seen: dict[str, int] = {}
    out = []
    for flavor in flavors:
        seen[flavor.name] = seen.get(flavor.name, 0) + 1
        out.append(f"{flavor.name}-{seen[flavor.name]}")
    return tuple(out)


def admit_linux(topo: Topology, flavors: Sequence[Flavor], overcommit: float) -> str:
    """Why the Linux host cannot take these VMs (empty: it can): more vCPUs than
    ``overcommit`` per CPU, or more memory than the host's."""
    vcpus = sum(f.vcpus for f in flavors)
    slots = int(overcommit * len(topo.cpus))
    if vcpus > slots:
        return f"{vcpus} vCPUs over the host's {slots} vCPU slots"
    memory = sum(f.memory_mib for f in flavors)
    have = sum(n.memory_bytes for n in topo.nodes) // MIB
    if memory > have:
        return f"{memory} MiB over the host's {have} MiB"
    return ""


def place_unicache(
    topo: Topology, flavors: Sequence[Flavor], overcommit: float
) -> tuple[list[tuple[dict[int, frozenset[int]], dict[int, int]]], str]:
    """Place the VMs with ``unicache place``'s function, in arrival order.

    :returns: per VM, (vCPU -> its CPU set, vCPU -> its memory node), and the first
        refusal's reason (empty: every VM placed).
    """
    fleet = place_fleet(topo, _arrivals(flavors), PlaceOptions(cpu_overcommit=overcommit),
                        Unify.LLC)
    if fleet.refused:
        return [], fleet.refused[0].reason
    out = []
    for placement in fleet.placed:
        affinity = {v.vcpu: v.cpus for v in placement.online()}
        nodes = {
            v: cell.node for cell in placement.cells for v in cell.vcpus if v in affinity
        }
        out.append((affinity, nodes))
    return out, ""


def unicache_cap(topo: Topology, flavors: Sequence[Flavor], overcommit: float) -> int:
    """How many of the first VMs of ``flavors`` :func:`place_unicache` places without a
    refusal: a VM's placement sees only those before it, so the first refusal of one pass
    over all of them bounds every prefix."""
    fleet = place_fleet(topo, _arrivals(flavors), PlaceOptions(cpu_overcommit=overcommit),
                        Unify.LLC, until_refused=True)
    return len(fleet.placed)


def _arrivals(flavors: Sequence[Flavor]) -> list[Arrival]:
    return [
        Arrival(VmRequest(name, f.vcpus, f.memory_mib, Profile(f.profile), f.name))
        for name, f in zip(vm_names(flavors), flavors, strict=True)
    ]


def linux_start_cpus(cfg: SimConfig, flavors: Sequence[Flavor]) -> list[dict[int, int]]:
    """Where fork balancing starts each VM's vCPU threads: the CPU with the fewest vCPUs,
    on the node, then the LLC group, with the fewest (sort keys: CPU load, node load,
    group load, CPU id)."""
    cpu_load = [0] * cfg.n_cpus
    node_load: dict[int, int] = {}
    group_load: dict[int, int] = {}
    out = []
    for flavor in flavors:
        starts = {}
        for vcpu in range(flavor.vcpus):
            cpu = min(
                range(cfg.n_cpus),
                key=lambda c: (
                    cpu_load[c],
                    node_load.get(cfg.cpu_node[c], 0),
                    group_load.get(cfg.group_of(c), 0),
                    c,
                ),
            )
            starts[vcpu] = cpu
            cpu_load[cpu] += 1
            node_load[cfg.cpu_node[cpu]] = node_load.get(cfg.cpu_node[cpu], 0) + 1
            group_load[cfg.group_of(cpu)] = group_load.get(cfg.group_of(cpu), 0) + 1
        out.append(starts)
    return out
