"""Machine models as TOML files: the shipped models, a user's file, and writing one back.

The format is docs/topology.md's; :func:`parse_toml` checks it and names the first
problem (a :class:`~unicache.errors.ConfigError`, exit 2 at the command line). File I/O:
policies never import this module (``make lint``'s import contracts), only the pure
:mod:`unicache.topology` values it builds.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import tomli_w

from unicache.cpulist import format_list, parse_list
from unicache.errors import ConfigError, TopologyError
from unicache.topology import (
    CacheLevel,
    CpuInfo,
    Inclusion,
    NumaNode,
    Scope,
    Topology,
)

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
