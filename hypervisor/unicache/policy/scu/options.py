"""SCU's options, derived from the machine: chunk size (MFC §4.7), ``min_read_size``
(§4.5), copies, and the cost model that decides where SCU steps aside.

Pure: a :class:`~unicache.topology.Topology` in, :class:`ScuOptions` out; a machine
without the figures (a discovered host) gets the documented defaults, and
``cost_source`` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unicache.policy.machine import cost_figures
from unicache.policy.scu.cost import CostModel
from unicache.policy.scu.mfc_state import MfcParams
from unicache.topology import Topology, Unify


@dataclass(frozen=True, slots=True)
class ScuOptions:
    """Options of the SCU policy.

    :param params: the Figure 2 parameters.
    :param chunk_size: §4.7 — half the size of a core's L2.
    :param update_period: rounds between two ``update_use`` agings.
    :param max_chunks: the most chunks remembered (bounded state).
    :param max_entries: the most entries in one VM's placement table.
    :param max_replays: the most ``mfc_access`` calls one reported chunk access may cause
        per round (reads are replayed, but a guest cannot buy unbounded policy work).
    :param max_accesses_per_vm: the most (chunk, vCPU) accesses of one VM replayed per
        round; the rest are skipped and counted in an ``SCU_BOUNDED`` refusal (a report of
        the protocol's largest size costs the round no more than this).
    :param cost_source: where the cost figures came from (model, or defaults).
    :param cost: the cost model behind ``min_read_size``, budgets, extents and the per-VM
        gain prediction (``None``: place every VM, MFC as published).
    :param watch: check each placed VM's measured reads against its unplaced ones
        (:mod:`unicache.policy.scu.watch`).
    """

    params: MfcParams
    chunk_size: int
    update_period: int = 4
    max_chunks: int = 65_536
    max_entries: int = 4_096
    max_replays: int = 8
    max_accesses_per_vm: int = 1 << 17
    cost_source: str = "model"
    cost: CostModel | None = None
    watch: bool = True


def min_read_size(
    migration_cycles: float, onchip_bytes_per_cycle: float, offchip_bytes_per_cycle: float
) -> int:
    """§4.5: the smallest read for which migrating beats loading from DRAM.

    Migrate when ``S/bw_off > migration + WS/bw_off + S/bw_on``, i.e.
    ``S > (migration + WS/bw_off) / (1/bw_off - 1/bw_on)``.

    :returns: the threshold in bytes; effectively infinite when on-chip is not faster.
    """
    paper = CostModel(onchip_bytes_per_cycle, offchip_bytes_per_cycle, migration_cycles, 1.0)
    return paper.min_read_size()  # the paper's rule: the cost model without a margin


def scu_options_for(topology: Topology, unify: Unify, **overrides: Any) -> ScuOptions:
    """Derive the SCU options from a machine.

    On-chip bandwidth is that of the outermost level inside a unit (the LLC for ``llc``,
    the last private level for ``l2``); off-chip is what one core achieves from DRAM.
    Missing figures fall back to the documented defaults and ``cost_source`` says so.

    :param topology: the machine.
    :param unify: the unification level.
    :param overrides: ``max_copies``, ``max_entries``... to override.
    """
    figures = cost_figures(topology, unify)
    onchip, offchip = figures.onchip_bytes_per_cycle, figures.offchip_bytes_per_cycle
    migration, source = figures.migration_cycles, figures.source
    clock = topology.clock_ghz * 1e9 if topology.clock_ghz else None
    cost = CostModel(onchip, offchip, migration, clock_hz=clock)
    # "a core's L2": level 2 whether private or shared (Core 2's L2 is its LLC)
    l2 = next((lv for lv in topology.levels if lv.level == 2), topology.llc)
    # §4.7: "The implementation's chunk size is half the size of a core's L2 cache";
    # where one such chunk saves less than a migration, an extent of them moves as one
    half_l2 = l2.size_bytes // 2
    units = topology.units(unify)
    params = MfcParams(
        min_read_size=overrides.pop("min_read_size", cost.min_read_size()),
        migration_cycles=int(migration),
        offchip_bytes_per_cycle=offchip,
        max_copies=overrides.pop("max_copies", len(units)),
    )
    return ScuOptions(
        params=params,
        chunk_size=overrides.pop("chunk_size", half_l2 * cost.extent_chunks(half_l2)),
        cost_source=source,
        cost=cost,
        **overrides,
    )
