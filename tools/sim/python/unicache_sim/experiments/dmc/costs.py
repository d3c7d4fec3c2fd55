"""DMC's costs (a what-if: no such hardware exists): the paper's FPGA platform, and the
same costs scaled to each machine model.

The DMC paper (dmc-data-movement-control-powerpc.md) measured its instructions on a
dual-core in-order Book-E PowerPC synthesized on a BEE3 FPGA (§6): 100 MHz, 64 KiB L1 per
core, a shared inclusive 512 KiB L2 (§3), 16-byte lines, 31 cycles to the L2 and 255 to
DRAM. Its text gives no other latency, so every DMC cost here is built from those two
figures and the message sequences of its Figures 1 and 2 (§4.1):

* a request/response *pair* between an L1 and the L2 costs the L2's 31 cycles;
* a *coherence miss* (a line another L1 holds modified, or a store to a line other L1s
  share) costs two pairs, 62 cycles: the L1's request to the L2 and the L2's recall or
  invalidation of the other L1 (the MSI message lists of §4.1);
* ``cllookup`` is one pair (Figure 2: Lookup request to the L2, its reply);
* ``cpush`` costs its core one cycle, "the processor pipeline doesn't wait" (§3.1); the
  line travels one pair later (Figure 1: Push response to the L2, M/S response to the
  destination); the FIFOs on the way hold 6 lines (§6.2);
* ``cmsg`` is a lookup, an active message to the core found, the handler there, and a
  reply message (§6.1). The active-message network's latency is not in the text: one
  message is taken as half a pair (16 cycles), and entering and leaving the handler, with
  the second register file of §4.3 (no registers saved), as a pipeline refill each way
  (5 cycles each): estimates.

Instructions cost one cycle each (a scalar in-order core with the L1 in its pipeline).

On a machine model a coherence miss costs the model's cache-to-cache latency: the LLC's
latency within an LLC group (the simulator serves a group-mate's line at the LLC's cost)
and ``cross_chip_cache_latency_cycles`` across groups. Each DMC cost is scaled by that
latency over the platform's 62 cycles (:func:`dmc_costs_for`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from unicache.topology import Topology

from unicache_sim.engine.config import LevelSpec, NodeSpec, SimConfig

#: §6: the platform's fixed latencies
PAPER_L2_CYCLES = 31.0
PAPER_DRAM_CYCLES = 255.0
PAPER_LINE_BYTES = 16
PAPER_CLOCK_GHZ = 0.1
#: §6.2: "the FIFOs connecting the pushing core's L1 cache, the shared L2, and the
#: destination cores L1 cache become full" past 6 pushed lines
PUSH_FIFO_LINES = 6
#: docs/simulator.md "Migration cost": the scheduler's hop of a thread between CPUs
#: (MFC §4.5, 9.2 us on the Opteron less its refill), and the refill it is followed by
HOP_NS = 8_400.0
REFILL_LINES = 64


@dataclass(frozen=True, slots=True)
class DmcCosts:
    """What each DMC instruction and each coherence event costs one machine, in cycles.

    :param name: the machine.
    :param source: where each figure comes from.
    :param l1_hit: a load or store that hits the core's L1 (one instruction).
    :param pair: one L1-L2 request/response pair.
    :param coherence_miss: a line held modified elsewhere, or a store's invalidation.
    :param lookup: ``cllookup`` of a line not in the core's own L1 (Figure 2).
    :param push_issue: what ``cpush`` costs the pushing core while the FIFO has room.
    :param push_transfer: one pushed line's trip to the destination (Figure 1).
    :param push_fifo: pushed lines in flight before the pushing core stalls (§6.2).
    :param message: one active message's trip (estimate, see the module docstring).
    :param handler_switch: entering plus leaving an active-message handler (estimate).
    """

    name: str
    source: str
    l1_hit: float = 1.0
    pair: float = PAPER_L2_CYCLES
    coherence_miss: float = 2 * PAPER_L2_CYCLES
    lookup: float = PAPER_L2_CYCLES
    push_issue: float = 1.0
    push_transfer: float = PAPER_L2_CYCLES
    push_fifo: int = PUSH_FIFO_LINES
    message: float = PAPER_L2_CYCLES / 2
    handler_switch: float = 10.0

    def scaled(self, name: str, c2c_cycles: float, source: str) -> DmcCosts:
        """The same mechanism on a machine whose coherence miss costs ``c2c_cycles``:
        every message latency scales with it; issuing an instruction stays one cycle."""
        k = c2c_cycles / self.coherence_miss
        return dataclasses.replace(
            self,
            name=name,
            source=source,
            pair=self.pair * k,
            coherence_miss=c2c_cycles,
            lookup=self.lookup * k,
            push_transfer=self.push_transfer * k,
            message=self.message * k,
            handler_switch=self.handler_switch,
        )


#: the paper's platform
PAPER_COSTS = DmcCosts(
    name="dmc-ppc (DMC paper §6)",
    source=(
        "DMC paper §6 (31-cycle L2, 255-cycle DRAM, 16-byte lines, 100 MHz); pairs and "
        "misses from the message lists of §4.1 and Figures 1-2; cpush issue §3.1, FIFO 6 "
        "lines §6.2; active message 16 cycles and handler switch 10: estimates"
    ),
)


def paper_config(costs: DmcCosts = PAPER_COSTS, line_size: int = PAPER_LINE_BYTES) -> SimConfig:
    """The paper's platform as a simulated machine (§3, §6): two cores, 64 KiB L1 each,
    one shared inclusive 512 KiB L2, 16-byte lines; its L2 and a line from the other L1
    cost ``costs``' pair and coherence miss (another model's, to run the microbenchmarks
    at its latencies, with its ``line_size``). The associativities are not in the text:
    4-way L1 and 8-way L2 (estimates; the microbenchmarks place their memory contiguously,
    as a bare-metal runtime does, so they do not conflict)."""
    line = line_size
    l1 = LevelSpec("L1", 64 * 1024 // line // 4, 4, "inclusive", costs.l1_hit, (0, 1))
    l2 = LevelSpec("L2", 512 * 1024 // line // 8, 8, "inclusive", costs.pair, (0, 0))
    return SimConfig(
        name="dmc-ppc",
        line_size=line,
        page_size=4096,
        levels=(l1, l2),
        cpu_node=(0, 0),
        nodes=(NodeSpec(1 << 28, PAPER_DRAM_CYCLES, PAPER_DRAM_CYCLES, 0.0),),
        # a line the other L1 holds modified: the L2 recalls it (two pairs)
        same_group_c2c_cycles=costs.coherence_miss,
        cross_group_c2c_cycles=costs.coherence_miss,
        migration_cycles=0.0,
        migration_cycles_remote=0.0,
        clock_ghz=PAPER_CLOCK_GHZ,
    )


def c2c_cycles(topo: Topology) -> tuple[float, float]:
    """A model's cache-to-cache latency within an LLC group and across groups, cycles."""
    same = float(topo.llc.latency_cycles or PAPER_COSTS.coherence_miss)
    cross = float(topo.cross_chip_cache_latency_cycles or same)
    return same, cross


def dmc_costs_for(topo: Topology, remote: bool) -> DmcCosts:
    """DMC's costs on a machine model, between two cores of one LLC group or of two."""
    same, cross = c2c_cycles(topo)
    c2c = cross if remote else same
    where = "cross_chip_cache_latency_cycles" if remote else "the LLC's latency_cycles"
    return PAPER_COSTS.scaled(
        f"{topo.name} ({'other' if remote else 'same'} LLC group)",
        c2c,
        f"{PAPER_COSTS.source}; scaled by {topo.name}'s {where} ({c2c:g} cycles) over the "
        f"platform's {PAPER_COSTS.coherence_miss:g}-cycle coherence miss",
    )


def push_refill_cycles(costs: DmcCosts, lines: int = REFILL_LINES) -> float:
    """Cycles until ``lines`` pushed lines have all arrived: the FIFO keeps
    ``push_fifo`` of them in flight, each trip ``push_transfer`` long."""
    return math.ceil(lines / costs.push_fifo) * costs.push_transfer
