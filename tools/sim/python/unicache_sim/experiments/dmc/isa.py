"""DMC's three instructions and plain loads and stores, one line at a time, on the
simulator's caches (a what-if: no such hardware exists).

A :class:`DmcMachine` is a native engine with memory laid out contiguously (as the
paper's bare-metal runtime allocates it) and one :class:`Core` per CPU. Each operation
returns what it costs the core that issues it, in cycles: where the line comes from is
the simulator's cache model (``Engine.access_line``), a store takes the line modified
(``Engine.invalidate``, MSI: the other copies go), and ``cllookup`` reads the presence
directory (``Engine.locate``). The costs of the DMC messages are
:class:`~unicache_sim.experiments.dmc.costs.DmcCosts`.

Semantics follow the DMC paper §3: ``cpush`` of a line the core holds shared copies it
to the destination, of a line it holds alone (modified) moves it there modified, of a line
it does not hold does nothing; ``cllookup`` answers the core itself, another core that
caches the line, or -1; ``cmsg`` runs a handler on the core that caches the line, and is
not delivered when that is the sender itself or nobody.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from unicache_sim.engine.config import SimConfig
from unicache_sim.experiments.dmc.costs import DmcCosts

#: a cllookup or cmsg that finds no other core
NOBODY = -1


@dataclass(frozen=True, slots=True)
class Region:
    """A contiguous piece of simulated memory.

    :param obj: the engine's object.
    :param lines: its size in lines.
    :param line_size: bytes per line.
    """

    obj: int
    lines: int
    line_size: int

    def offset(self, line: int) -> int:
        """Byte offset of line ``line`` of the region."""
        if not 0 <= line < self.lines:
            raise IndexError(f"line {line} outside a region of {self.lines}")
        return line * self.line_size


class DmcMachine:
    """A machine for the DMC microbenchmarks: its engine, costs and cores.

    :param cfg: the simulated machine.
    :param costs: what DMC's messages cost on it.
    :param seed: the engine's seed (frames are placed contiguously whatever it is).
    """

    def __init__(self, cfg: SimConfig, costs: DmcCosts, seed: int = 1) -> None:
        self.cfg = cfg
        self.costs = costs
        self.engine = cfg.engine(seed)
        # colors of the largest cache's way: page i of the memory gets color i, so that
        # memory is contiguous for every cache (a bump allocator, no page conflicts)
        self._colors = max(1, max(lv.sets * cfg.line_size // cfg.page_size for lv in cfg.levels))
        self._next_page = 0
        self.cores = tuple(Core(self, cpu) for cpu in range(cfg.n_cpus))

    def alloc(self, lines: int) -> Region:
        """``lines`` lines of fresh memory, page-aligned, after the previous region."""
        line = self.cfg.line_size
        size = lines * line
        obj = self.engine.add_object(size, "node", 0)
        pages = -(-size // self.cfg.page_size)
        for page in range(pages):
            color = (self._next_page + page) % self._colors
            self.engine.place_page(obj, page, 0, self._colors, color)
        self._next_page += pages
        return Region(obj, lines, line)


class Core:
    """One core issuing loads, stores and DMC instructions.

    :param machine: its machine.
    :param cpu: its CPU number.
    """

    def __init__(self, machine: DmcMachine, cpu: int) -> None:
        self.machine = machine
        self.cpu = cpu

    def load(self, region: Region, line: int) -> float:
        """A load: the line from wherever the cache model finds it."""
        engine = self.machine.engine
        _, cycles = engine.access_line(self.cpu, region.obj, region.offset(line), "read")
        return cycles

    def store(self, region: Region, line: int) -> float:
        """A store: the line is fetched if missing, then every other copy is invalidated;
        a store that hit a line other caches shared waits for that (an upgrade)."""
        engine = self.machine.engine
        offset = region.offset(line)
        source, cycles = engine.access_line(self.cpu, region.obj, offset, "write")
        invalidated = engine.invalidate(self.cpu, region.obj, offset, 1)
        if invalidated and source == self.machine.cfg.levels[0].name:
            cycles += self.machine.costs.coherence_miss
        return cycles

    def holds(self, region: Region, line: int) -> bool:
        """Whether the line is in this core's private caches."""
        cpus, _ = self.machine.engine.locate(region.obj, region.offset(line))
        return self.cpu in cpus

    def cpush(self, region: Region, lines: list[int], dst: int) -> float:
        """``cpush`` of each line to core ``dst`` (DMC §3.1). The pushing core pays one
        cycle per push while the FIFO has room (``push_fifo`` lines in flight), then a
        transfer per push for the slot to free; the lines arrive before the destination
        looks (the run-queue hand-off outlasts the transfers)."""
        engine = self.machine.engine
        costs = self.machine.costs
        cycles = 0.0
        in_flight = 0
        for line in lines:
            offset = region.offset(line)
            cpus, _ = engine.locate(region.obj, offset)
            if self.cpu not in cpus:
                cycles += costs.push_issue  # not cached here: dropped
                continue
            shared = any(c != self.cpu for c in cpus)
            engine.touch(dst, region.obj, offset, region.line_size, "read")
            if not shared:
                # modified here: moved, the destination holds it modified
                engine.invalidate(dst, region.obj, offset, 1)
            in_flight += 1
            cycles += costs.push_issue if in_flight <= costs.push_fifo else costs.push_transfer
        return cycles

    def cllookup(self, region: Region, line: int) -> tuple[int, float]:
        """``cllookup`` (DMC §3.2): this core if it caches the line, else another core that
        does (the directory's answer), else :data:`NOBODY`; and its cost."""
        costs = self.machine.costs
        cpus, _ = self.machine.engine.locate(region.obj, region.offset(line))
        if self.cpu in cpus:
            return self.cpu, costs.l1_hit
        return (cpus[0] if cpus else NOBODY), costs.lookup

    def cmsg(
        self, region: Region, line: int, handler: Callable[[Core], float]
    ) -> tuple[bool, float]:
        """``cmsg`` addressed by a line (DMC §3.3): the handler runs on the core that caches
        it; the sender waits for the reply. Returns (delivered, cycles): not delivered
        when the line is in this core's cache or in none (the sender then does the work
        itself), costing only the lookup."""
        dst, cycles = self.cllookup(region, line)
        if dst == NOBODY or dst == self.cpu:
            return False, cycles
        costs = self.machine.costs
        work = handler(self.machine.cores[dst])
        return True, cycles + 2 * (costs.message + costs.handler_switch) + work
