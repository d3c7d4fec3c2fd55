"""OBS-X stays on a vCPU's home nodes: the NUMA nodes its VM's memory is bound to.

The observations paper's OBS-X ("Policy: Migrating across caches") moves a task to the LLC
group with the smallest cache load; its machine had one memory. On a NUMA host a VM that
``unicache place`` put on a node has its memory there, strict (``<numatune>``), and its
vCPUs pinned to that node's CPUs. A move to a lighter LLC group on another node turns
every one of the vCPU's misses remote: each line then takes the remote latency instead of
the local one, the dual-layered file cache paper's "latency gap" (its Opteron 246: 70 ns
local, 104 ns one hop, a gap above 48 %). The move's cost is certain and falls on every
miss; its gain falls only on the misses a lighter LLC would turn into hits, none for a
vCPU whose misses are compulsory (a stream: ``unicache density``'s stream tenants read
remote at half their bandwidth when OBS-X moved them, issue #16). So OBS-X keeps a vCPU on
its home nodes, and says so with the cost it predicted when the lightest unit lay
elsewhere.

A vCPU's home is what OBS first sees of it: the nodes of the CPUs it may run on when it
first appears, if they are fewer than the host's (the placement's pins; memory goes
where the pins are). A vCPU first seen free to run anywhere (no placement: Linux's first
touch spreads its memory) has no home, and OBS-X moves it as before.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from unicache.model import Observation, Refusal, VcpuId
from unicache.topology import CacheUnit

#: the decision-log kind of a move OBS-X did not make because it would leave the home nodes
OBS_HOME_NODE = "OBS_HOME_NODE"


def home_nodes(
    obs: Observation,
    units: Iterable[CacheUnit],
    before: Mapping[VcpuId, frozenset[int]],
    known: Iterable[VcpuId],
) -> dict[VcpuId, frozenset[int]]:
    """Every live vCPU's home nodes (module docstring).

    :param obs: this round's observation (each vCPU's CPU set now).
    :param units: the host's cache units (their CPUs and nodes).
    :param before: the homes kept from earlier rounds.
    :param known: vCPUs OBS has seen before (a vCPU OBS pinned itself gets no home now).
    """
    node_of = {cpu: u.node for u in units for cpu in u.cpus}
    everywhere = frozenset(node_of.values())
    seen = frozenset(known)
    out: dict[VcpuId, frozenset[int]] = {}
    for vm in obs.vms:
        for vcpu in vm.vcpus:
            if vcpu.id in before:
                out[vcpu.id] = before[vcpu.id]
                continue
            if vcpu.id in seen:
                continue
            nodes = frozenset(node_of[c] for c in vcpu.cpus if c in node_of)
            if nodes and nodes < everywhere:
                out[vcpu.id] = nodes
    return out


def at_home(unit: CacheUnit, home: frozenset[int] | None) -> bool:
    """Whether a unit lies on the home nodes (every unit does for a vCPU without a home)."""
    return home is None or unit.node in home


@dataclass(frozen=True, slots=True)
class AwayCost:
    """What a move off the home nodes would cost a vCPU.

    :param stall_share: the share of its run time it spends on its misses.
    :param remote_gap: the latency gap each miss would pay.
    :param gap_source: where the gap comes from.
    """

    stall_share: float
    remote_gap: float
    gap_source: str

    @property
    def share(self) -> float:
        """The share of its run time the move would add."""
        return self.stall_share * self.remote_gap


def kept_home(
    vcpu: VcpuId, home: frozenset[int], lightest: CacheUnit, chosen: CacheUnit, cost: AwayCost
) -> Refusal:
    """The decision-log line of a vCPU OBS-X kept on its home nodes."""
    nodes = ",".join(str(n) for n in sorted(home))
    return Refusal(
        OBS_HOME_NODE,
        f"OBS-X keeps {vcpu} in unit {chosen.id} on node {nodes}, where its memory is: the "
        f"lightest unit {lightest.id} is on node {lightest.node}, where each of its misses "
        f"would be remote (latency gap {cost.remote_gap:.2f}, {cost.gap_source}), costing "
        f"{cost.share:.3g} of its run time (misses {cost.stall_share:.3g} of it) against a "
        "gain only on misses a lighter LLC would turn into hits",
    )
