"""Machine topology as a value: CPUs, cache levels, LLC groups, NUMA nodes and cache units.

A :class:`Topology` comes from one of two places, and only these functions touch them:
:func:`discover_topology` reads sysfs (what this machine really has) and
:func:`load_model`/:func:`load_file` read a TOML machine model (what a modelled machine
has, including latencies and bandwidths that sysfs cannot tell). :func:`dump_toml`
writes the same format back, so a discovered host can be saved and edited into a model.

A *cache unit* is what software cache unification treats as one cache (MFC §3: "a
core's cache"). With ``Unify.LLC`` a unit is an LLC group; with ``Unify.L2`` it is one
core with its private levels — the only multi-unit setting on
a machine with a single LLC.
"""

from __future__ import annotations

import enum
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import tomli_w

from unicache.cpulist import format_list, parse_list
from unicache.errors import ConfigError, TopologyError

#: sysfs cache ``type`` values that hold data
_DATA_TYPES = frozenset({"Data", "Unified"})


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

    def __post_init__(self) -> None:
        _validate(self)
        object.__setattr__(self, "_groups", _build_groups(self.cpus))

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
        for info in self.cpus:
            if info.cpu == number:
                return info
        raise TopologyError(f"no cpu {number} in topology {self.name}")

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


# --- TOML models ----------------------------------------------------------------------------

_MODEL_PACKAGE = "unicache.models"


def model_names() -> tuple[str, ...]:
    """Names of the shipped machine models."""
    files = resources.files(_MODEL_PACKAGE).iterdir()
    return tuple(sorted(f.name[:-5] for f in files if f.name.endswith(".toml")))


def load_model(name: str) -> Topology:
    """Load a shipped machine model by name (e.g. ``opteron-16``).

    :raises ConfigError: if there is no such model.
    """
    if name not in model_names():
        raise ConfigError(f"no machine model {name!r} (known: {', '.join(model_names())})")
    text = resources.files(_MODEL_PACKAGE).joinpath(f"{name}.toml").read_text()
    return parse_toml(text, origin=name)


def load_file(path: Path) -> Topology:
    """Load a machine model from a TOML file.

    :raises ConfigError: if the file cannot be read or parsed.
    """
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read model file {path}") from err
    return parse_toml(text, origin=str(path))


def parse_toml(text: str, origin: str) -> Topology:
    """Build a topology from the TOML model format (see docs/topology.md).

    :param text: the TOML text.
    :param origin: file or model name, for messages.
    :raises ConfigError: naming the first problem.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{origin}: not valid TOML") from err
    try:
        return _from_dict(data)
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"{origin}: bad machine model ({type(err).__name__}: {err})") from err
    except TopologyError as err:
        raise ConfigError(f"{origin}: {err.error_message}") from err


def _from_dict(data: dict[str, Any]) -> Topology:
    line = int(data.get("line_size", 64))
    levels = tuple(
        CacheLevel(
            level=int(lv["level"]),
            size_bytes=int(lv["size_kib"]) * 1024,
            ways=int(lv["ways"]),
            line_size=int(lv.get("line_size", line)),
            scope=Scope(lv["scope"]),
            inclusion=Inclusion(lv.get("inclusion", "unknown")),
            latency_cycles=_opt_int(lv.get("latency_cycles")),
            bandwidth_bytes_per_cycle=_opt_float(lv.get("bandwidth_bytes_per_cycle")),
        )
        for lv in data["levels"]
    )
    siblings: dict[int, int] = {}
    for text in data.get("smt_siblings", []):
        members = sorted(parse_list(text))
        for cpu in members:
            siblings[cpu] = members[0]
    node_of: dict[int, int] = {}
    nodes: list[NumaNode] = []
    for nd in data["nodes"]:
        cpus = parse_list(str(nd.get("cpus", "")))
        for cpu in cpus:
            node_of[cpu] = int(nd["id"])
        nodes.append(
            NumaNode(
                id=int(nd["id"]),
                cpus=cpus,
                memory_bytes=_memory_bytes(nd),
                distances=tuple(int(d) for d in nd["distances"]),
                dram_latency_cycles=_opt_int(nd.get("dram_latency_cycles")),
                dram_bandwidth_bytes_per_cycle=_opt_float(nd.get("dram_bandwidth_bytes_per_cycle")),
                controllers=int(nd.get("controllers", 1)),
                core_dram_bandwidth_bytes_per_cycle=_opt_float(
                    nd.get("core_dram_bandwidth_bytes_per_cycle")
                ),
            )
        )
    infos: list[CpuInfo] = []
    for gid, grp in enumerate(data["llc_groups"]):
        for cpu in sorted(parse_list(str(grp["cpus"]))):
            if cpu not in node_of:
                raise ValueError(f"cpu {cpu} of llc group {gid} is in no node")
            core = siblings.get(cpu, cpu)
            infos.append(CpuInfo(cpu, core, int(grp.get("socket", 0)), node_of[cpu], gid))
    return Topology(
        name=str(data["name"]),
        source=str(data.get("source", "")),
        description=str(data.get("description", "")),
        cpus=tuple(sorted(infos)),
        levels=tuple(sorted(levels, key=lambda lv: lv.level)),
        nodes=tuple(sorted(nodes, key=lambda n: n.id)),
        clock_ghz=_opt_float(data.get("clock_ghz")),
        page_size=int(data.get("page_size", 4096)),
        migration_cycles=_opt_int(data.get("migration_cycles")),
        migration_cycles_remote=_opt_int(data.get("migration_cycles_remote")),
        remote_latency_cycles=_opt_int(data.get("remote_latency_cycles")),
        cross_chip_cache_latency_cycles=_opt_int(data.get("cross_chip_cache_latency_cycles")),
        forwards_clean_lines=_bool(data.get("forwards_clean_lines", True), "forwards_clean_lines"),
    )


def _memory_bytes(node: dict[str, Any]) -> int:
    if "memory_kib" in node:
        return int(node["memory_kib"]) * 1024
    return int(node["memory_mib"]) * 1024 * 1024


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _bool(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, not {value!r}")
    return value


def _opt_float(value: object) -> float | None:
    return None if value is None else float(str(value))


def to_dict(topo: Topology) -> dict[str, Any]:
    """The TOML model form of a topology (``None`` fields are left out)."""
    out: dict[str, Any] = {
        "name": topo.name,
        "description": topo.description,
        "source": topo.source,
        "line_size": topo.line_size,
        "page_size": topo.page_size,
    }
    for key in (
        "clock_ghz",
        "migration_cycles",
        "migration_cycles_remote",
        "remote_latency_cycles",
        "cross_chip_cache_latency_cycles",
    ):
        value = getattr(topo, key)
        if value is not None:
            out[key] = value
    if not topo.forwards_clean_lines:
        out["forwards_clean_lines"] = False
    sibling_sets = [c for c in topo.cores().values() if len(c) > 1]
    if sibling_sets:
        out["smt_siblings"] = [format_list(s) for s in sibling_sets]
    out["levels"] = [
        _drop_none(
            {
                "level": lv.level,
                "size_kib": lv.size_bytes // 1024,
                "ways": lv.ways,
                "line_size": lv.line_size,
                "scope": str(lv.scope),
                "inclusion": str(lv.inclusion),
                "latency_cycles": lv.latency_cycles,
                "bandwidth_bytes_per_cycle": lv.bandwidth_bytes_per_cycle,
            }
        )
        for lv in topo.levels
    ]
    out["nodes"] = [
        _drop_none(
            {
                "id": n.id,
                "cpus": format_list(n.cpus),
                "memory_kib": n.memory_bytes // 1024,
                "distances": list(n.distances),
                "dram_latency_cycles": n.dram_latency_cycles,
                "dram_bandwidth_bytes_per_cycle": n.dram_bandwidth_bytes_per_cycle,
                "controllers": n.controllers,
                "core_dram_bandwidth_bytes_per_cycle": n.core_dram_bandwidth_bytes_per_cycle,
            }
        )
        for n in topo.nodes
    ]
    out["llc_groups"] = [
        {"cpus": format_list(g.cpus), "socket": g.socket} for g in topo.llc_groups()
    ]
    return out


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def dump_toml(topo: Topology) -> str:
    """Serialise a topology to the TOML model format (round-trips through :func:`parse_toml`)."""
    return tomli_w.dumps(to_dict(topo))


# --- sysfs discovery ------------------------------------------------------------------------


def discover_topology(sysfs_root: Path = Path("/sys")) -> Topology:
    """Read this machine's topology from sysfs; nothing is invented.

    Latencies, bandwidths and migration costs are not in sysfs and stay ``None``;
    inclusion is ``unknown``.

    :param sysfs_root: the sysfs mount (a copied tree in tests).
    :raises TopologyError: if sysfs lacks the CPU or cache description.
    """
    cpu_root = sysfs_root / "devices/system/cpu"
    try:
        online = parse_list(_read(cpu_root / "online"))
        levels: dict[int, CacheLevel] = {}
        llc_sets: list[frozenset[int]] = []
        raw: list[tuple[int, int, int, frozenset[int]]] = []
        for cpu in sorted(online):
            base = cpu_root / f"cpu{cpu}"
            socket = int(_read(base / "topology/physical_package_id"))
            siblings = parse_list(_read(base / "topology/thread_siblings_list"))
            top_level = 0
            llc_shared: frozenset[int] = frozenset({cpu})
            for index in sorted((base / "cache").glob("index*")):
                if _read(index / "type") not in _DATA_TYPES:
                    continue
                level = int(_read(index / "level"))
                shared = parse_list(_read(index / "shared_cpu_list"))
                scope = Scope.CORE if shared <= siblings else Scope.LLC_GROUP
                levels.setdefault(
                    level,
                    CacheLevel(
                        level=level,
                        size_bytes=_parse_size(_read(index / "size")),
                        ways=int(_read(index / "ways_of_associativity")),
                        line_size=int(_read(index / "coherency_line_size")),
                        scope=scope,
                    ),
                )
                if level > top_level:
                    top_level, llc_shared = level, shared & online
            if llc_shared not in llc_sets:
                llc_sets.append(llc_shared)
            raw.append((cpu, min(siblings), socket, llc_shared))
    except (OSError, ValueError) as err:
        raise TopologyError(f"cannot read cpu topology under {cpu_root}") from err
    if not levels:
        raise TopologyError(f"no cache description under {cpu_root}/cpu*/cache")
    nodes = _discover_nodes(sysfs_root, online)
    node_of = {cpu: n.id for n in nodes for cpu in n.cpus}
    group_ids = {cpus: gid for gid, cpus in enumerate(sorted(llc_sets, key=min))}
    cpus = tuple(
        CpuInfo(cpu, core, socket, node_of.get(cpu, 0), group_ids[shared])
        for cpu, core, socket, shared in raw
    )
    return Topology(
        name="host",
        source=f"sysfs ({sysfs_root})",
        description="this machine, as sysfs describes it",
        cpus=cpus,
        levels=tuple(levels[k] for k in sorted(levels)),
        nodes=nodes,
    )


def _discover_nodes(sysfs_root: Path, online: frozenset[int]) -> tuple[NumaNode, ...]:
    node_root = sysfs_root / "devices/system/node"
    if not node_root.is_dir():
        # a kernel without NUMA support: one node holding every CPU
        return (NumaNode(0, online, 0, (10,)),)
    nodes = []
    for path in sorted(node_root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        mem_kib = 0
        for line in _read(path / "meminfo").splitlines():
            if "MemTotal:" in line:
                mem_kib = int(line.split()[-2])
        nodes.append(
            NumaNode(
                id=int(path.name[4:]),
                cpus=parse_list(_read(path / "cpulist")) & online,
                memory_bytes=mem_kib * 1024,
                distances=tuple(int(d) for d in _read(path / "distance").split()),
            )
        )
    return tuple(nodes)


def _read(path: Path) -> str:
    return path.read_text().strip()


def _parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024 * 1024, "G": 1024 * 1024 * 1024}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def load_topology(model: str | None = None, file: Path | None = None) -> Topology:
    """The topology a command works on: a named model, a model file, or this machine.

    :raises ConfigError: if both a model and a file are given, or either is bad.
    """
    if model is not None and file is not None:
        raise ConfigError("give either --model or --file, not both")
    if model is not None:
        return load_model(model)
    if file is not None:
        return load_file(file)
    return discover_topology()
