"""``unicache topology`` and ``unicache models``: the machine as unicache sees it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from unicache.cli.common import (
    FileOpt,
    JsonOpt,
    ModelOpt,
    UnifyOpt,
    app,
    kib,
    out,
)
from unicache.cpulist import format_list
from unicache.errors import ConfigError
from unicache.topology import Topology, Unify
from unicache.topology.sysfs import load_topology
from unicache.topology.toml import model_names


def topology_json(topo: Topology, unify: Unify) -> dict[str, Any]:
    """The JSON form ``unicache topology --json`` prints.

    :param topo: the machine.
    :param unify: the unification level for the ``units`` list.
    """
    return {
        "name": topo.name,
        "description": topo.description,
        "source": topo.source,
        "clock_ghz": topo.clock_ghz,
        "page_size": topo.page_size,
        "migration_cycles": topo.migration_cycles,
        "migration_cycles_remote": topo.migration_cycles_remote,
        "remote_latency_cycles": topo.remote_latency_cycles,
        "cross_chip_cache_latency_cycles": topo.cross_chip_cache_latency_cycles,
        "cpus": [
            {
                "cpu": c.cpu,
                "core": c.core,
                "socket": c.socket,
                "node": c.node,
                "llc_group": c.llc_group,
            }
            for c in topo.cpus
        ],
        "levels": [
            {
                "level": lv.level,
                "size_bytes": lv.size_bytes,
                "ways": lv.ways,
                "sets": lv.sets,
                "line_size": lv.line_size,
                "scope": str(lv.scope),
                "inclusion": str(lv.inclusion),
                "latency_cycles": lv.latency_cycles,
                "bandwidth_bytes_per_cycle": lv.bandwidth_bytes_per_cycle,
            }
            for lv in topo.levels
        ],
        "llc_groups": [
            {"id": g.id, "cpus": format_list(g.cpus), "socket": g.socket, "node": g.node}
            for g in topo.llc_groups()
        ],
        "smt_siblings": [format_list(c) for c in topo.cores().values() if len(c) > 1],
        "nodes": [
            {
                "id": n.id,
                "cpus": format_list(n.cpus),
                "memory_bytes": n.memory_bytes,
                "distances": list(n.distances),
                "dram_latency_cycles": n.dram_latency_cycles,
                "dram_bandwidth_bytes_per_cycle": n.dram_bandwidth_bytes_per_cycle,
                "core_dram_bandwidth_bytes_per_cycle": n.core_dram_bandwidth_bytes_per_cycle,
                "controllers": n.controllers,
            }
            for n in topo.nodes
        ],
        "unify": str(unify),
        "units": [
            {
                "id": u.id,
                "cpus": format_list(u.cpus),
                "capacity_bytes": u.capacity_bytes,
                "llc_group": u.llc_group,
                "node": u.node,
            }
            for u in topo.units(unify)
        ],
    }


#: the options of ``topology``, one alias each (the command's signature stays short)
_TopologySave = Annotated[
    Path | None, typer.Option("--save", help="Also write the topology as a TOML model.")
]


@app.command()
def topology(
    model: ModelOpt = None,
    file: FileOpt = None,
    unify: UnifyOpt = "llc",
    json_out: JsonOpt = False,
    save: _TopologySave = None,
) -> None:
    """Show a machine's LLC groups, cache levels, NUMA nodes and cache units.

    Without --model or --file it reads this machine's sysfs and reports only what sysfs
    says: latencies and bandwidths are not in sysfs and show as unknown.
    """
    from unicache.topology.toml import dump_toml

    topo = load_topology(model, file)
    level = Unify(unify)
    if save is not None:
        try:
            save.write_text(dump_toml(topo))
        except OSError as err:
            raise ConfigError(f"cannot write {save}") from err
    if json_out:
        print(json.dumps(topology_json(topo, level), indent=2))
        return
    _print_tables(topo, level)


def _print_tables(topo: Topology, level: Unify) -> None:
    """The machine as tables: cache levels, LLC groups, NUMA nodes, cache units."""
    out.print(f"[bold]{topo.name}[/bold]: {topo.description}")
    out.print(f"source: {topo.source}")
    levels = Table(
        "level",
        "size",
        "ways",
        "sets",
        "line",
        "shared by",
        "inclusion",
        "latency (cycles)",
        "bandwidth (B/cycle)",
        title="cache levels",
    )
    for lv in topo.levels:
        levels.add_row(
            f"L{lv.level}",
            kib(lv.size_bytes),
            str(lv.ways),
            str(lv.sets),
            str(lv.line_size),
            str(lv.scope),
            str(lv.inclusion),
            "unknown" if lv.latency_cycles is None else str(lv.latency_cycles),
            "unknown"
            if lv.bandwidth_bytes_per_cycle is None
            else f"{lv.bandwidth_bytes_per_cycle:g}",
        )
    out.print(levels)
    groups = Table("LLC group", "cpus", "socket", "node", title="LLC groups")
    for g in topo.llc_groups():
        groups.add_row(str(g.id), format_list(g.cpus), str(g.socket), str(g.node))
    out.print(groups)
    nodes = Table("node", "cpus", "memory", "distances", "DRAM latency", title="NUMA nodes")
    for n in topo.nodes:
        nodes.add_row(
            str(n.id),
            format_list(n.cpus) or "-",
            kib(n.memory_bytes),
            " ".join(map(str, n.distances)),
            "unknown" if n.dram_latency_cycles is None else f"{n.dram_latency_cycles} cycles",
        )
    out.print(nodes)
    units = Table(
        "unit",
        "cpus",
        "capacity (M_on-chip)",
        "LLC group",
        "node",
        title=f"cache units (--unify {level})",
    )
    for u in topo.units(level):
        units.add_row(
            str(u.id), format_list(u.cpus), kib(u.capacity_bytes), str(u.llc_group), str(u.node)
        )
    out.print(units)
    if len(topo.units(level)) < 2:
        out.print(
            f"note: only one cache unit with --unify {level}: nothing to unify "
            "(try --unify l2 on a machine with one LLC)"
        )


@app.command()
def models(json_out: JsonOpt = False) -> None:
    """List the shipped machine models."""
    from unicache.topology.toml import load_model

    rows = [(name, load_model(name)) for name in model_names()]
    if json_out:
        print(
            json.dumps(
                [
                    {
                        "name": n,
                        "description": t.description,
                        "cpus": len(t.cpus),
                        "llc_groups": len(t.llc_groups()),
                        "nodes": len(t.nodes),
                    }
                    for n, t in rows
                ],
                indent=2,
            )
        )
        return
    table = Table("model", "cpus", "LLC groups", "nodes", "description")
    for name, topo in rows:
        table.add_row(
            name,
            str(len(topo.cpus)),
            str(len(topo.llc_groups())),
            str(len(topo.nodes)),
            topo.description,
        )
    out.print(table)
