"""Placement of a new VM: which cache units and CPUs its vCPUs should start on.

OBS-X's rule for a new task ("Policy: Migrating across caches": "When a new task is
created, OBS-X looks for the LLC group with the smallest cache load") applied vCPU by
vCPU, so a VM's vCPUs spread over the lightest units — which is also what SCU needs
(MFC §3: a VM whose vCPUs sit in several units can use all their caches). Memory goes to
the NUMA node holding most of the chosen units that has room for it. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from unicache.cpulist import format_list
from unicache.errors import PolicyRefusal
from unicache.topology import CacheUnit, NumaNode


@dataclass(frozen=True, slots=True)
class UnitLoad:
    """What is on a unit now.

    :param unit: the unit.
    :param cache_load: sum of its vCPUs' cache weights (OBS-X "cache load").
    :param vcpus: vCPUs placed there.
    """

    unit: CacheUnit
    cache_load: float = 0.0
    vcpus: int = 0


@dataclass(frozen=True, slots=True)
class VcpuPlacement:
    """Where one vCPU of the new VM goes.

    :param vcpu: its index.
    :param unit: the unit.
    :param cpus: the unit's CPUs (the vCPU floats inside its unit).
    :param reason: why.
    """

    vcpu: int
    unit: int
    cpus: frozenset[int]
    reason: str


@dataclass(frozen=True, slots=True)
class VmPlacement:
    """A proposal for a new VM.

    :param vcpus: per-vCPU placement.
    :param emulator_cpus: where QEMU's other threads go: the lightest unit's CPUs.
    :param node: the NUMA node for its memory, if memory was asked for.
    :param reason: one line for the whole proposal.
    """

    vcpus: tuple[VcpuPlacement, ...]
    emulator_cpus: frozenset[int]
    node: int | None
    reason: str


def place_vm(
    loads: tuple[UnitLoad, ...],
    vcpus: int,
    memory_bytes: int = 0,
    free_memory: Mapping[int, int] | None = None,
    nodes: tuple[NumaNode, ...] = (),
) -> VmPlacement:
    """Propose units and CPUs for a new VM of ``vcpus`` vCPUs.

    :param loads: every unit with its current load.
    :param vcpus: how many vCPUs.
    :param memory_bytes: its memory (0: no NUMA advice).
    :param free_memory: node -> free bytes (default: each node's size).
    :param nodes: the NUMA nodes.
    :raises PolicyRefusal: ``CPUS_EXHAUSTED`` when asked for no vCPU or no unit exists.
    """
    if vcpus < 1 or not loads:
        raise PolicyRefusal(
            f"cannot place {vcpus} vCPUs on {len(loads)} units", PolicyRefusal.CPUS_EXHAUSTED
        )
    state = {u.unit.id: [u.cache_load, u.vcpus] for u in loads}
    units = {u.unit.id: u.unit for u in loads}
    # a new vCPU's weight is unknown until it runs: expect the average of the vCPUs there
    # are (or 1 on an empty host), so the VM's own vCPUs do not all stack on one unit
    placed = sum(u.vcpus for u in loads)
    expected = sum(u.cache_load for u in loads) / placed if placed else 1.0
    expected = expected or 1.0
    out: list[VcpuPlacement] = []
    for index in range(vcpus):
        # sort keys: cache load, vCPUs per CPU already there, unit id
        unit_id = min(state, key=lambda u: (state[u][0], state[u][1] / len(units[u].cpus), u))
        state[unit_id][0] += expected
        state[unit_id][1] += 1
        unit = units[unit_id]
        out.append(
            VcpuPlacement(
                index,
                unit_id,
                unit.cpus,
                f"OBS-X: lightest unit {unit_id} (cache load {state[unit_id][0]:.3g}, "
                f"{state[unit_id][1]} vCPUs on {len(unit.cpus)} cpus)",
            )
        )
    # emulator threads go to the lightest unit not given to a vCPU, else the lightest
    used = {p.unit for p in out}
    spare = [u for u in state if u not in used] or list(state)
    emulator = min(spare, key=lambda u: (state[u][0], state[u][1], u))
    node = None
    if memory_bytes > 0 and nodes:
        free = dict(free_memory or {n.id: n.memory_bytes for n in nodes})
        votes = {n.id: sum(1 for p in out if units[p.unit].node == n.id) for n in nodes}
        fitting = [n.id for n in nodes if free.get(n.id, 0) >= memory_bytes]
        if fitting:
            # sort keys: most of the VM's units on the node, most free memory, node id
            node = max(fitting, key=lambda n: (votes[n], free.get(n, 0), -n))
    spread = len(used)
    reason = (
        f"{vcpus} vCPUs over {spread} unit{'s' if spread > 1 else ''} "
        f"(lightest first, OBS-X){'' if node is None else f'; memory on node {node}'}"
    )
    return VmPlacement(tuple(out), units[emulator].cpus, node, reason)


def libvirt_fragment(placement: VmPlacement) -> str:
    """The ``<cputune>``/``<numatune>`` XML a libvirt domain needs for the proposal."""
    lines = ["<cputune>"]
    for vcpu in placement.vcpus:
        lines.append(f"  <vcpupin vcpu='{vcpu.vcpu}' cpuset='{format_list(vcpu.cpus)}'/>")
    lines.append(f"  <emulatorpin cpuset='{format_list(placement.emulator_cpus)}'/>")
    lines.append("</cputune>")
    if placement.node is not None:
        lines += [
            "<numatune>",
            f"  <memory mode='preferred' nodeset='{placement.node}'/>",
            "</numatune>",
        ]
    return "\n".join(lines)
