"""This machine's topology: read from sysfs, or the model or file a command names.

:func:`discover_topology` reads what the machine really has (nothing is invented);
:func:`load_topology` is what every command works on: ``--model``, ``--file`` or this
machine.
"""

from __future__ import annotations

from pathlib import Path

from unicache.cpulist import parse_list
from unicache.errors import ConfigError, TopologyError
from unicache.topology import CacheLevel, CpuInfo, NumaNode, Scope, Topology
from unicache.topology.toml import load_file, load_model

#: sysfs cache ``type`` values that hold data
_DATA_TYPES = frozenset({"Data", "Unified"})


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
