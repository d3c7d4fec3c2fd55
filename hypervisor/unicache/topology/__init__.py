"""Machine topology as a value: CPUs, cache levels, LLC groups, NUMA nodes and cache units.

Pure: this module is all policies import (an import contract in ``make lint``). A
:class:`Topology` comes from one of two places, each a submodule of its own:
:mod:`unicache.topology.sysfs` reads what this machine really has, and
:mod:`unicache.topology.toml` reads a TOML machine model (what a modelled machine has,
including latencies and bandwidths that sysfs cannot tell) and writes the same format
back, so a discovered host can be saved and edited into a model.

A *cache unit* is what software cache unification treats as one cache (MFC §3: "a
core's cache"). With ``Unify.LLC`` a unit is an LLC group; with ``Unify.L2`` it is one
core with its private levels — the only multi-unit setting on
a machine with a single LLC.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from unicache.errors import TopologyError


class Unify(enum.StrEnum):
    """The unification level: what one cache unit is."""

    #: one unit per LLC group (the default)
    LLC = "llc"
    #: one unit per core with its private levels (L1 + L2)
    L2 = "l2"


class Scope(enum.StrEnum):
    """Who shares a cache level."""

    #: private to one core (shared by its SMT siblings only)
    CORE = "core"
    #: shared by all cores of an LLC group
    LLC_GROUP = "llc_group"


class Inclusion(enum.StrEnum):
    """How a level relates to the smaller levels above it."""

    #: holds a copy of everything above it
    INCLUSIVE = "inclusive"
    #: holds nothing that the levels above hold
    EXCLUSIVE = "exclusive"
    #: filled only by lines evicted from above (an exclusive level; AMD's L3)
    VICTIM = "victim"
    #: not known (sysfs does not say); treated as inclusive, the conservative choice
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class CacheLevel:
    """One data cache level of the hierarchy.

    :param level: 1 for L1, 2 for L2, ...
    :param size_bytes: capacity of one instance.
    :param ways: associativity.
    :param line_size: bytes per line.
    :param scope: private to a core or shared by an LLC group.
    :param inclusion: relation to the levels above.
    :param latency_cycles: load-to-use latency, if known.
    :param bandwidth_bytes_per_cycle: what one core reading from it achieves, if known.
    """

    level: int
    size_bytes: int
    ways: int
    line_size: int
    scope: Scope
    inclusion: Inclusion = Inclusion.UNKNOWN
    latency_cycles: int | None = None
    bandwidth_bytes_per_cycle: float | None = None

    @property
    def sets(self) -> int:
        """Number of sets (size / ways / line size)."""
        return self.size_bytes // (self.ways * self.line_size)

    @property
    def lines(self) -> int:
        """Number of lines (``m_lines`` of MFC eq. 1)."""
        return self.size_bytes // self.line_size

    @property
    def adds_capacity(self) -> bool:
        """Whether its capacity adds to the levels above (exclusive) or contains them."""
        return self.inclusion in (Inclusion.EXCLUSIVE, Inclusion.VICTIM)


@dataclass(frozen=True, slots=True, order=True)
class CpuInfo:
    """One logical CPU.

    :param cpu: the logical CPU number.
    :param core: the physical core it belongs to (SMT siblings share it).
    :param socket: the package.
    :param node: the NUMA node.
    :param llc_group: the LLC group (index into :meth:`Topology.llc_groups`).
    """

    cpu: int
    core: int
    socket: int
    node: int
    llc_group: int


@dataclass(frozen=True, slots=True)
class NumaNode:
    """A NUMA node.

    :param id: node number.
    :param cpus: its CPUs (may be empty for memory-only nodes).
    :param memory_bytes: its memory.
    :param distances: SLIT distances to every node, indexed by node id.
    :param dram_latency_cycles: local DRAM latency, if known.
    :param dram_bandwidth_bytes_per_cycle: bandwidth of the node's memory, if known.
    :param controllers: DRAM controllers of the node.
    :param core_dram_bandwidth_bytes_per_cycle: what one core reading from the node's DRAM
        achieves (latency-bound, below the node's total), if known; MFC §4.5 uses it.
    """

    id: int
    cpus: frozenset[int]
    memory_bytes: int
    distances: tuple[int, ...]
    dram_latency_cycles: int | None = None
    dram_bandwidth_bytes_per_cycle: float | None = None
    controllers: int = 1
    core_dram_bandwidth_bytes_per_cycle: float | None = None


@dataclass(frozen=True, slots=True)
class LlcGroup:
    """CPUs that share one last-level cache.

    :param id: group number, ordered by lowest CPU.
    :param cpus: its CPUs.
    :param socket: its package.
    :param node: the NUMA node of its CPUs.
    """

    id: int
    cpus: frozenset[int]
    socket: int
    node: int


@dataclass(frozen=True, slots=True)
class CacheUnit:
    """What software cache unification treats as one cache.

    :param id: unit number.
    :param cpus: CPUs whose threads use this unit's cache.
    :param capacity_bytes: ``M_on-chip`` of MFC eq. 2 for this unit.
    :param llc_group: the LLC group it lies in.
    :param node: its NUMA node.
    """

    id: int
    cpus: frozenset[int]
    capacity_bytes: int
    llc_group: int
    node: int


@dataclass(frozen=True, slots=True)
class Topology:
    """A machine: CPUs, cache levels, NUMA nodes and the costs a policy needs.

    :param name: model name, or ``"host"`` for a discovered machine.
    :param source: where the figures come from (paper and figure, or ``sysfs``).
    :param cpus: every logical CPU, ordered by number.
    :param levels: data cache levels, ordered L1 first; the last one is the LLC.
    :param nodes: NUMA nodes, ordered by id.
    :param description: one line for humans.
    :param clock_ghz: core clock, if known.
    :param page_size: bytes per base page.
    :param migration_cycles: cost of moving a thread between cores of one chip, if known.
    :param migration_cycles_remote: the same across chips, if known.
    :param remote_latency_cycles: latency of DRAM on another node, if known.
    :param cross_chip_cache_latency_cycles: latency of a line in another chip's cache.
    :param forwards_clean_lines: whether another chip's cache supplies a clean line it
        holds (MESIF, MOESI with a forwarder); ``False``: only a dirty owner does, and
        clean lines come from their home DRAM (MOESI on the MFC paper's Opteron).
    """

    name: str
    source: str
    cpus: tuple[CpuInfo, ...]
    levels: tuple[CacheLevel, ...]
    nodes: tuple[NumaNode, ...]
    description: str = ""
    clock_ghz: float | None = None
    page_size: int = 4096
    migration_cycles: int | None = None
    migration_cycles_remote: int | None = None
    remote_latency_cycles: int | None = None
    cross_chip_cache_latency_cycles: int | None = None
    forwards_clean_lines: bool = True
    _groups: tuple[LlcGroup, ...] = field(default=(), repr=False, compare=False)
    # CPU number -> its info: :meth:`cpu` is called per vCPU per round (one step, not a scan)
    _by_number: dict[int, CpuInfo] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        _validate(self)
        object.__setattr__(self, "_groups", _build_groups(self.cpus))
        # the first of duplicate numbers, as a scan finds it (_validate does not forbid them)
        by_number = {info.cpu: info for info in reversed(self.cpus)}
        object.__setattr__(self, "_by_number", by_number)

    # --- queries -------------------------------------------------------------------------

    @property
    def llc(self) -> CacheLevel:
        """The last-level cache."""
        return self.levels[-1]

    @property
    def line_size(self) -> int:
        """Cache line size of the LLC."""
        return self.llc.line_size

    def llc_groups(self) -> tuple[LlcGroup, ...]:
        """The LLC groups, ordered by lowest CPU."""
        return self._groups

    def cpus_in_llc(self, group: int) -> frozenset[int]:
        """CPUs of one LLC group."""
        return self._groups[group].cpus

    def cores(self) -> dict[int, frozenset[int]]:
        """Physical core -> its logical CPUs (SMT siblings)."""
        out: dict[int, set[int]] = {}
        for info in self.cpus:
            out.setdefault(info.core, set()).add(info.cpu)
        return {core: frozenset(cpus) for core, cpus in sorted(out.items())}

    def private_levels(self) -> tuple[CacheLevel, ...]:
        """Levels private to a core."""
        return tuple(lvl for lvl in self.levels if lvl.scope is Scope.CORE)

    def private_bytes(self) -> int:
        """Distinct bytes one core's private levels can hold together."""
        return _stack_capacity(self.private_levels())

    def units(self, unify: Unify = Unify.LLC) -> tuple[CacheUnit, ...]:
        """The cache units for a unification level (MFC §3, "a core's cache").

        With ``LLC`` a unit's capacity is the LLC plus, for exclusive or victim LLCs,
        the private levels of its cores. With ``L2`` it is one core's private levels.

        :param unify: the unification level.
        :returns: the units, ordered by lowest CPU.
        """
        llc = self.llc
        units: list[CacheUnit] = []
        if unify is Unify.LLC or llc.scope is Scope.CORE:
            for group in self._groups:
                cores = {self.cpu(c).core for c in group.cpus}
                if llc.scope is Scope.CORE:
                    capacity = self.private_bytes()
                elif llc.adds_capacity:
                    capacity = llc.size_bytes + len(cores) * self.private_bytes()
                else:
                    capacity = max(llc.size_bytes, len(cores) * self.private_bytes())
                units.append(CacheUnit(group.id, group.cpus, capacity, group.id, group.node))
            return tuple(units)
        # Unify.L2: a unit is one core and its private levels only. The LLC is left out on
        # purpose: every unit of the group reaches it, so counting a share of it would make
        # SCU believe a unit holds data that really sits in the shared LLC.
        for group in self._groups:
            for core in sorted({self.cpu(c).core for c in group.cpus}):
                cpus = frozenset(c for c in group.cpus if self.cpu(c).core == core)
                units.append(
                    CacheUnit(len(units), cpus, self.private_bytes(), group.id, group.node)
                )
        return tuple(units)

    def cpu(self, number: int) -> CpuInfo:
        """Look up one CPU.

        :raises TopologyError: if there is no such CPU.
        """
        info = self._by_number.get(number)
        if info is None:
            raise TopologyError(f"no cpu {number} in topology {self.name}")
        return info

    def keep_only(self, cpus: Iterable[int]) -> Topology:
        """The same machine restricted to some CPUs (e.g. the ones unicache may use)."""
        wanted = frozenset(cpus)
        kept = tuple(c for c in self.cpus if c.cpu in wanted)
        nodes = tuple(replace(n, cpus=n.cpus & wanted) for n in self.nodes)
        return replace(self, cpus=kept, nodes=nodes)


def _stack_capacity(levels: Iterable[CacheLevel]) -> int:
    total = 0
    for lvl in levels:
        total = total + lvl.size_bytes if lvl.adds_capacity else max(total, lvl.size_bytes)
    return total


def _build_groups(cpus: tuple[CpuInfo, ...]) -> tuple[LlcGroup, ...]:
    by_group: dict[int, list[CpuInfo]] = {}
    for info in cpus:
        by_group.setdefault(info.llc_group, []).append(info)
    return tuple(
        LlcGroup(gid, frozenset(i.cpu for i in members), members[0].socket, members[0].node)
        for gid, members in sorted(by_group.items())
    )


def _validate(topo: Topology) -> None:
    # 1. at least one CPU and one level, or nothing can be placed
    if not topo.cpus or not topo.levels:
        raise TopologyError(f"topology {topo.name}: needs at least one cpu and one cache level")
    # 2. LLC groups are numbered 0..n-1 so that units and groups index the same way
    groups = sorted({c.llc_group for c in topo.cpus})
    if groups != list(range(len(groups))):
        raise TopologyError(f"topology {topo.name}: llc groups must be numbered 0..n-1")
    # 3. every CPU's node exists
    node_ids = {n.id for n in topo.nodes}
    for info in topo.cpus:
        if info.node not in node_ids:
            raise TopologyError(f"topology {topo.name}: cpu {info.cpu} on unknown node")
    # 4. geometry: size = sets * ways * line, or set-index math in the simulator breaks
    for lvl in topo.levels:
        if lvl.size_bytes <= 0 or lvl.ways <= 0 or lvl.line_size <= 0:
            raise TopologyError(f"topology {topo.name}: L{lvl.level} has a non-positive size")
        if lvl.sets * lvl.ways * lvl.line_size != lvl.size_bytes:
            raise TopologyError(
                f"topology {topo.name}: L{lvl.level} size {lvl.size_bytes} is not "
                f"sets x ways x line ({lvl.ways} ways, {lvl.line_size} B lines)"
            )
