"""Builds the native simulator's machine configuration from a unicache Topology.

The Rust core knows nothing about model files: this module turns a
:class:`unicache.topology.Topology` into per-level instance maps and per-line costs.

Costs are *stall cycles per 64-byte line* for a thread streaming through a file:

* a cache level: ``line_size / bandwidth_bytes_per_cycle`` when the model gives the
  bandwidth one core achieves from it, else its ``latency_cycles``;
* local DRAM: ``line_size / core_dram_bandwidth_bytes_per_cycle`` (MFC §6.6.1: one core
  reads 256 KiB from DRAM in 145 us), else the DRAM latency;
* remote DRAM and another chip's cache: the local DRAM line cost scaled by their latency
  relative to local DRAM latency (the same memory-level parallelism);
* another core's cache on the same chip: the LLC line cost (no separate figure in models);
* the DRAM queue server of a node: ``line_size / (dram_bandwidth_bytes_per_cycle * scale)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicache.errors import ConfigError
from unicache.topology import CacheLevel, Inclusion, Scope, Topology

from unicache_sim import _native

#: stall cycles per line when a model gives neither bandwidth nor latency for a level
_FALLBACK_LEVEL_CYCLES = 10.0
#: DRAM latency assumed when a node has none (cycles)
_FALLBACK_DRAM_LATENCY = 200.0


@dataclass(frozen=True, slots=True)
class LevelSpec:
    """One simulated cache level.

    :param name: "L1", "L2", ...
    :param sets: sets per instance.
    :param ways: associativity.
    :param inclusion: "inclusive", "exclusive", "victim" or "nine".
    :param hit_cycles: stall cycles per line served by this level.
    :param instance_of: instance serving each CPU.
    """

    name: str
    sets: int
    ways: int
    inclusion: str
    hit_cycles: float
    instance_of: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One simulated NUMA node.

    :param memory_bytes: its memory.
    :param local_line_cycles: stall per line read by a CPU of this node.
    :param remote_line_cycles: stall per line read by a CPU of another node.
    :param service_line_cycles: DRAM busy time per line (the queue server).
    """

    memory_bytes: int
    local_line_cycles: float
    remote_line_cycles: float
    service_line_cycles: float


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything the native engine needs.

    :param name: model name (with a suffix for derived machines, e.g. ``/oracle``).
    :param line_size: bytes per line.
    :param page_size: bytes per page.
    :param levels: cache levels, L1 first.
    :param cpu_node: NUMA node of each CPU.
    :param nodes: NUMA nodes.
    :param same_group_c2c_cycles: stall per line from a same-chip core's cache.
    :param cross_group_c2c_cycles: stall per line from another chip's cache.
    :param migration_cycles: cost of a thread migration within a chip.
    :param migration_cycles_remote: cost of a migration across chips.
    :param clock_ghz: core clock, to turn cycles into seconds.
    :param cross_group_clean_from_dram: a line only another chip's caches hold is read from
        its home DRAM (the model's ``forwards_clean_lines = false``).
    """

    name: str
    line_size: int
    page_size: int
    levels: tuple[LevelSpec, ...]
    cpu_node: tuple[int, ...]
    nodes: tuple[NodeSpec, ...]
    same_group_c2c_cycles: float
    cross_group_c2c_cycles: float
    migration_cycles: float
    migration_cycles_remote: float
    clock_ghz: float
    cross_group_clean_from_dram: bool = False

    @property
    def n_cpus(self) -> int:
        """Number of CPUs."""
        return len(self.cpu_node)

    def group_of(self, cpu: int) -> int:
        """LLC group (last-level instance) of a CPU."""
        return self.levels[-1].instance_of[cpu]

    def migration_cost(self, src: int, dst: int) -> float:
        """Cycles of moving a thread from CPU ``src`` to ``dst`` (0 when it stays)."""
        if src == dst:
            return 0.0
        if self.group_of(src) == self.group_of(dst):
            return self.migration_cycles
        return self.migration_cycles_remote

    def on_chip_bytes(self) -> int:
        """Total bytes of all cache instances of all levels."""
        total = 0
        for lv in self.levels:
            total += lv.sets * lv.ways * self.line_size * (max(lv.instance_of) + 1)
        return total

    def engine(self, seed: int = 1) -> _native.Engine:
        """A cold native engine for this machine.

        :param seed: seed of the page allocator.
        :returns: the engine.
        """
        return _native.Engine(
            self.line_size,
            self.page_size,
            [
                (lv.name, lv.sets, lv.ways, lv.inclusion, lv.hit_cycles, list(lv.instance_of))
                for lv in self.levels
            ],
            list(self.cpu_node),
            [
                (n.memory_bytes, n.local_line_cycles, n.remote_line_cycles, n.service_line_cycles)
                for n in self.nodes
            ],
            self.same_group_c2c_cycles,
            self.cross_group_c2c_cycles,
            self.migration_cycles,
            seed,
            self.cross_group_clean_from_dram,
        )


def _inclusion(level: CacheLevel) -> str:
    # unknown is treated as inclusive, as unicache.topology documents
    if level.inclusion is Inclusion.UNKNOWN:
        return "inclusive"
    return str(level.inclusion)


def _level_cycles(level: CacheLevel) -> float:
    if level.bandwidth_bytes_per_cycle:
        return level.line_size / level.bandwidth_bytes_per_cycle
    if level.latency_cycles is not None:
        return float(level.latency_cycles)
    return _FALLBACK_LEVEL_CYCLES


def from_topology(topo: Topology, dram_bw_scale: float = 1.0) -> SimConfig:
    """The simulated machine of a topology model.

    :param topo: the machine model.
    :param dram_bw_scale: factor on every node's DRAM bandwidth (MFC §6.5.1 throttling).
    :returns: the configuration.
    :raises ConfigError: if the model cannot be simulated.
    """
    if dram_bw_scale <= 0:
        raise ConfigError(f"--dram-bw-scale must be positive, not {dram_bw_scale}")
    cpus = sorted(topo.cpus, key=lambda c: c.cpu)
    if [c.cpu for c in cpus] != list(range(len(cpus))):
        raise ConfigError(f"model {topo.name}: cpus must be numbered 0..n-1 to be simulated")
    line = topo.line_size
    core_ids = sorted({c.core for c in cpus})
    levels = []
    for lv in topo.levels:
        if lv.scope is Scope.CORE:
            inst = tuple(core_ids.index(c.core) for c in cpus)
        else:
            inst = tuple(c.llc_group for c in cpus)
        levels.append(
            LevelSpec(f"L{lv.level}", lv.sets, lv.ways, _inclusion(lv), _level_cycles(lv), inst)
        )
    nodes = []
    any_lat = next((n.dram_latency_cycles for n in topo.nodes if n.dram_latency_cycles), None)
    dram_lat = float(any_lat or _FALLBACK_DRAM_LATENCY)
    remote_lat = float(topo.remote_latency_cycles or dram_lat)
    for n in topo.nodes:
        lat = float(n.dram_latency_cycles or dram_lat)
        local = (
            line / n.core_dram_bandwidth_bytes_per_cycle
            if n.core_dram_bandwidth_bytes_per_cycle
            else lat
        )
        remote = local * remote_lat / lat
        service = (
            line / (n.dram_bandwidth_bytes_per_cycle * dram_bw_scale)
            if n.dram_bandwidth_bytes_per_cycle
            else 0.0
        )
        nodes.append(NodeSpec(n.memory_bytes or (1 << 32), local, remote, service))
    node_ids = [n.id for n in topo.nodes]
    if node_ids != list(range(len(node_ids))):
        raise ConfigError(f"model {topo.name}: nodes must be numbered 0..n-1 to be simulated")
    # per-line cost of DRAM relative to its latency: the memory-level parallelism factor
    per_latency = nodes[0].local_line_cycles / float(topo.nodes[0].dram_latency_cycles or dram_lat)
    cross = float(topo.cross_chip_cache_latency_cycles or dram_lat) * per_latency
    migration = float(topo.migration_cycles or 0)
    return SimConfig(
        name=topo.name,
        line_size=line,
        page_size=topo.page_size,
        levels=tuple(levels),
        cpu_node=tuple(c.node for c in cpus),
        nodes=tuple(nodes),
        same_group_c2c_cycles=levels[-1].hit_cycles,
        cross_group_c2c_cycles=cross,
        migration_cycles=migration,
        migration_cycles_remote=float(topo.migration_cycles_remote or migration),
        clock_ghz=topo.clock_ghz or 2.0,
        cross_group_clean_from_dram=not topo.forwards_clean_lines,
    )


def oracle(cfg: SimConfig) -> SimConfig:
    """The limit machine: every level's instances merged into one shared cache of their
    total size (same latencies, inclusion and associativity), and free migration.

    :param cfg: the real machine.
    :returns: the oracle machine (same CPUs and nodes).
    """
    levels = []
    for lv in cfg.levels:
        count = max(lv.instance_of) + 1
        levels.append(
            LevelSpec(
                lv.name,
                lv.sets * count,
                lv.ways,
                lv.inclusion,
                lv.hit_cycles,
                tuple(0 for _ in cfg.cpu_node),
            )
        )
    return SimConfig(
        name=f"{cfg.name}/oracle",
        line_size=cfg.line_size,
        page_size=cfg.page_size,
        levels=tuple(levels),
        cpu_node=cfg.cpu_node,
        nodes=cfg.nodes,
        same_group_c2c_cycles=cfg.same_group_c2c_cycles,
        cross_group_c2c_cycles=cfg.cross_group_c2c_cycles,
        migration_cycles=0.0,
        migration_cycles_remote=0.0,
        clock_ghz=cfg.clock_ghz,
        cross_group_clean_from_dram=cfg.cross_group_clean_from_dram,
    )


def single_core(
    sizes: tuple[tuple[int, int], ...], line_size: int = 64, inclusion: str = "nine"
) -> SimConfig:
    """A one-CPU machine with the given (sets, ways) levels: the pycachesim comparison.

    :param sizes: (sets, ways) per level, L1 first.
    :param line_size: bytes per line.
    :param inclusion: inclusion of every level below L1.
    :returns: the configuration.
    """
    levels = tuple(
        LevelSpec(f"L{i + 1}", s, w, "nine" if i == 0 else inclusion, 1.0, (0,))
        for i, (s, w) in enumerate(sizes)
    )
    return SimConfig(
        name="single-core",
        line_size=line_size,
        page_size=4096,
        levels=levels,
        cpu_node=(0,),
        nodes=(NodeSpec(1 << 34, 100.0, 100.0, 0.0),),
        same_group_c2c_cycles=0.0,
        cross_group_c2c_cycles=0.0,
        migration_cycles=0.0,
        migration_cycles_remote=0.0,
        clock_ghz=2.0,
    )
