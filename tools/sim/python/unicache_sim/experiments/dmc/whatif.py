"""SCU on DMC hardware, a what-if (no such hardware exists): a machine model whose
migrations cost what ``cpush``-assisted migration costs, and a guest shim that finds a
chunk with ``cllookup`` instead of the software table alone.

Migration modes (each machine model's figures from docs/simulator.md "Migration cost":
a migration is the scheduler's hop plus the refill of the thread's working set):

* ``push``: the operating system still moves the thread (the hop stays), but the source
  pushes the thread's context and working set (``REFILL_LINES``) to the target while it
  does (DMC §3.1): the refill is gone, the pushes cost one cycle each. The hop is
  ``HOP_NS`` at the model's clock, never more than the model's own migration figure.
* ``handoff``: DMC §6.2's migration: a run-queue hand-off with the context pushed (the
  Figure 4 program, :func:`~unicache_sim.experiments.dmc.micro.pingpong`, run at the
  model's cache-to-cache latency and line size, half a round trip), plus the working set
  pushed through the FIFO (:func:`~unicache_sim.experiments.dmc.costs.push_refill_cycles`).
  It needs a scheduler that runs the hand-off itself (a user-level runtime, or a kernel
  path built for it): no operating system today migrates a thread that way.

Both are bounds in DMC's favour: every pushed line is assumed to arrive before it is used.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from unicache.model import ChunkId
from unicache.topology import Topology

from unicache_sim.experiments.dmc.costs import (
    HOP_NS,
    REFILL_LINES,
    dmc_costs_for,
    push_refill_cycles,
)
from unicache_sim.experiments.dmc.micro import CONTEXT_WORDS, pingpong
from unicache_sim.guest import shimrule
from unicache_sim.guest.opensample import COUNTED_WHOLE, OpenFile
from unicache_sim.guest.shim import GuestShim
from unicache_sim.guest.simhost import SimHost

MigrationMode = Literal["none", "push", "handoff"]
#: the migration what-ifs (``none``: the model's own migration cost, the default)
MIGRATION_MODES: tuple[MigrationMode, ...] = ("none", "push", "handoff")
#: what the what-if machine's name and source say, so no figure passes for a real one
WHATIF_LABEL = "WHAT-IF: DMC hardware (cpush, cllookup) that does not exist"


def dmc_migration_cycles(topo: Topology, mode: MigrationMode, remote: bool) -> float:
    """One migration on ``topo`` within an LLC group or across groups, in ``mode``."""
    own = float((topo.migration_cycles_remote if remote else None) or topo.migration_cycles or 0.0)
    costs = dmc_costs_for(topo, remote)
    if mode == "none":
        return own
    if mode == "push":
        hop = HOP_NS * (topo.clock_ghz or 2.0)
        hop = min(hop, own) if own else hop
        return max(hop, push_refill_cycles(costs)) + REFILL_LINES * costs.push_issue
    context_lines = -(-CONTEXT_WORDS * 4 // topo.line_size)
    one_way = pingpong(context_lines, costs, topo.line_size, round_trips=4) / 2
    return one_way + push_refill_cycles(costs)


def dmc_topology(topo: Topology, mode: MigrationMode) -> Topology:
    """``topo`` with the migration costs of ``mode``, named and sourced as a what-if (the
    daemon's cost model then believes them too, as it would on such a machine)."""
    if mode == "none":
        return topo
    same = dmc_migration_cycles(topo, mode, remote=False)
    remote = dmc_migration_cycles(topo, mode, remote=True)
    return dataclasses.replace(
        topo,
        name=f"{topo.name}+dmc-{mode}",
        source=f"{WHATIF_LABEL}: migration '{mode}' (unicache_sim.experiments.dmc.whatif); "
        f"otherwise {topo.source}",
        migration_cycles=round(same),
        migration_cycles_remote=round(remote),
    )


class LookupShim(GuestShim):
    """The guest shim with ``cllookup`` (DMC §3.2): before its rule places a read, the
    shim asks the directory where the read's first line is cached; if some LLC groups
    hold it, the read goes to the vCPUs on those groups (where the data really is), else
    to the table's (SCU's assignment, so that the chunk is loaded there). Each lookup costs
    the thread a directory round trip at the model's cross-group latency.

    The software table stays: it still chooses where an uncached chunk goes, whether it is
    cached at all, and the migration budget. The shim's own table lookup is in the cost it
    is charged per call (:mod:`unicache_sim.guest.shimcost`, the placed figures), the same
    with or without ``cllookup``, so only the lookup's accuracy can gain here.

    :param host: the simulated host.
    :param topo: the machine model (the lookup's latency).
    :param seed: the run's seed (the opens' draws, as :class:`GuestShim` takes it).
    """

    def __init__(self, host: SimHost, topo: Topology, seed: int = 0) -> None:
        super().__init__(host, seed=seed)
        self.lookup_cycles = dmc_costs_for(topo, remote=True).lookup
        self._where: tuple[int, int] | None = None

    def read_chunk(
        self,
        tid: int,
        obj: int,
        chunk: ChunkId,
        offset: int,
        length: int,
        compute: float,
        file_bytes: int,
        opened: OpenFile = COUNTED_WHOLE,
    ) -> None:
        self._where = (obj, offset)
        super().read_chunk(tid, obj, chunk, offset, length, compute, file_bytes, opened)

    def _place(
        self,
        tid: int,
        vcpus: shimrule.VcpuMaskT,
        budget: int,
        chunk: ChunkId,
        length: int,
        min_read_size: int,
    ) -> None:
        host = self.host
        if self._where is not None:
            obj, offset = self._where
            host.engine.push_compute(tid, self.lookup_cycles)
            _, groups = host.engine.locate(obj, offset)
            held = frozenset(groups)
            exact = {v for v, cpu in host.vcpu_cpu.items() if host.cfg.group_of(cpu) in held}
            if exact:
                vcpus = exact
        super()._place(tid, vcpus, budget, chunk, length, min_read_size)
