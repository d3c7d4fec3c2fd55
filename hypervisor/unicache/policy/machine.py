"""The machine's figures every technique reads, with the documented defaults where a model
(or sysfs) has none: what reading on-chip and from DRAM and a migration cost (MFC §4.5,
for SCU's cost model and OBS's miss cost), and the remote-latency gap (the dual-layered
file cache paper's, for OBS's home nodes and NCC's replica gain).

Below the techniques (``scu``, ``obs``, ``srm``, ``ncc``, ``place``), which import no
one another: what two of them share lives here. Pure: a
:class:`~unicache.topology.Topology` in, figures and where they came from out.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicache.topology import Topology, Unify

#: used where the machine model has no figure (a discovered host): documented defaults
DEFAULT_MIGRATION_CYCLES = 20_000
DEFAULT_ONCHIP_BYTES_PER_CYCLE = 3.0
DEFAULT_OFFCHIP_BYTES_PER_CYCLE = 1.0
#: the latency gap without a machine figure: the dual-layered file cache paper's Opteron
#: 246, (104 ns one hop - 70 ns local) / 70 ns
DEFAULT_REMOTE_GAP = (104.0 - 70.0) / 70.0


@dataclass(frozen=True, slots=True)
class CostFigures:
    """A machine's cost figures at one unification level.

    :param onchip_bytes_per_cycle: the outermost level inside a unit (the LLC for ``llc``,
        the last private level for ``l2``).
    :param offchip_bytes_per_cycle: what one core achieves from DRAM.
    :param migration_cycles: a migration between units (the cross-chip figure where the
        model has one).
    :param source: ``model``, or ``defaults for ...`` naming the missing figures.
    """

    onchip_bytes_per_cycle: float
    offchip_bytes_per_cycle: float
    migration_cycles: float
    source: str


def cost_figures(topology: Topology, unify: Unify) -> CostFigures:
    """The machine's cost figures, the documented defaults for those it lacks."""
    levels = topology.levels if unify is Unify.LLC else topology.private_levels()
    outer = (levels or topology.levels)[-1]
    node = topology.nodes[0]
    offchip = node.core_dram_bandwidth_bytes_per_cycle or node.dram_bandwidth_bytes_per_cycle
    missing = [
        name
        for name, value in (
            ("migration cost", topology.migration_cycles),
            ("on-chip bandwidth", outer.bandwidth_bytes_per_cycle),
            ("DRAM bandwidth", offchip),
        )
        if value is None
    ]
    # SCU's migrations cross units: the cross-chip figure where the model has one
    migration = (
        topology.migration_cycles_remote or topology.migration_cycles or DEFAULT_MIGRATION_CYCLES
    )
    onchip = outer.bandwidth_bytes_per_cycle or DEFAULT_ONCHIP_BYTES_PER_CYCLE
    offchip = offchip or DEFAULT_OFFCHIP_BYTES_PER_CYCLE
    source = "model" if not missing else "defaults for " + ", ".join(missing)
    return CostFigures(onchip, offchip, migration, source)


def remote_gap_for(topology: Topology) -> tuple[float, str]:
    """The latency gap of a machine: (remote DRAM latency - local) / local, and its origin.

    Local is the mean of the nodes' DRAM latencies; without both figures, the paper's
    :data:`DEFAULT_REMOTE_GAP`.
    """
    local = [n.dram_latency_cycles for n in topology.nodes if n.dram_latency_cycles]
    remote = topology.remote_latency_cycles
    if not local or not remote:
        return DEFAULT_REMOTE_GAP, "the dual-layered file cache paper's Opteron 246"
    mean = sum(local) / len(local)
    return max(0.0, (remote - mean) / mean), f"{topology.name}: {remote} / {mean:g} cycles"
