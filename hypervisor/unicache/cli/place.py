"""``unicache place``: where a new VM goes, the libvirt XML for it, applying it, and fleets.

Three uses of one pure function, :func:`unicache.policy.place.vm.place_vm` (docs/placement.md):

* ``unicache place --vcpus N --memory MIB [--profile P]``: the placement and its libvirt
  fragment, on this host (the daemon's observed weights and libvirt's running domains)
  or on a machine model (``--model``, idle);
* ``unicache place --apply DOMAIN``: the same for a defined, stopped domain, written into
  its persistent definition;
* ``unicache place --model M --arrivals FILE``: a fleet of requests packed in order on one
  modelled host, with where each went, which were refused and the load per LLC group and
  node.

A VM that does not fit is one line and exit code 2 (a refusal is a user-visible error,
never a bad placement). A fleet's refusals are part of its report (exit 0).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.table import Table

from unicache.cli.common import FileOpt, JsonOpt, ModelOpt, UnifyOpt, app, out
from unicache.cpulist import format_list
from unicache.errors import ConfigError
from unicache.policy.place.fleet import FleetResult, parse_arrivals, place_fleet
from unicache.policy.place.options import PlaceOptions, Profile
from unicache.policy.place.types import PlacedVm, Placement, VmRequest, placement_to_dict
from unicache.policy.place.vm import MAX_VCPUS, place_vm
from unicache.topology import Topology, Unify
from unicache.topology.sysfs import load_topology

PROFILE_CHOICE = click.Choice([str(p) for p in Profile])


#: the options of ``place``, one alias each (the command's signature stays short)
_PlaceVcpus = Annotated[int | None, typer.Option("--vcpus", help="vCPUs of the new VM (1..4096).")]
_PlaceMemory = Annotated[
    int, typer.Option("--memory", help="Its memory in MiB (0: CPUs only, no memory plan).")
]
_PlaceProfile = Annotated[
    str | None,
    typer.Option(
        "--profile",
        click_type=PROFILE_CHOICE,
        help="compact (fill whole LLC groups), spread (OBS-X: lightest groups) "
        "or auto (from observed weights of its flavor); default: the "
        "config's [place] profile, else auto.",
    ),
]
_PlaceName = Annotated[
    str, typer.Option("--name", help="Its name (placed again: keeps its placement).")
]
_PlaceFlavor = Annotated[
    str, typer.Option("--flavor", help="Its flavor (default: the name without -N).")
]
_PlaceConfig = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="The daemon's TOML config: its [place] table "
        "sets capacity (cpu_overcommit, memory per node) and the profile.",
    ),
]
_PlaceStateDir = Annotated[
    Path, typer.Option("--state-dir", help="Where a running daemon writes status.json.")
]
_PlaceConnect = Annotated[
    str,
    typer.Option(
        "--connect",
        "-C",
        help="libvirt URI for the running domains and --apply ('none': " "no libvirt).",
    ),
]
_PlaceApply = Annotated[
    str | None,
    typer.Option(
        "--apply",
        help="Write the placement into this defined, stopped "
        "domain's definition (its vCPUs and memory are the request).",
    ),
]
_PlaceArrivals = Annotated[
    Path | None,
    typer.Option(
        "--arrivals",
        help="Pack a fleet of requests (TOML [[vm]] or JSON "
        "lines; docs/placement.md) in order on the host or model.",
    ),
]


@app.command()
def place(
    vcpus: _PlaceVcpus = None,
    memory: _PlaceMemory = 0,
    profile: _PlaceProfile = None,
    name: _PlaceName = "new-vm",
    flavor: _PlaceFlavor = "",
    model: ModelOpt = None,
    file: FileOpt = None,
    unify: UnifyOpt = "llc",
    config: _PlaceConfig = None,
    state_dir: _PlaceStateDir = Path("/run/unicache"),
    connect: _PlaceConnect = "qemu:///system",
    apply: _PlaceApply = None,
    arrivals: _PlaceArrivals = None,
    json_out: JsonOpt = False,
) -> None:
    """Place a VM: NUMA node(s), LLC groups, pins, memory and the guest's topology.

    A VM that fits one NUMA node stays in it; compact fills whole LLC groups, spread
    takes the lightest (OBS-X); a VM larger than a node gets the fewest nodes, one guest
    cell each. On this host it sees the daemon's observed weights and libvirt's running
    domains; with --model every VM starts on an idle machine. Prints the libvirt XML.
    """
    from unicache.config import load_config

    options = load_config(config).place
    level = Unify(unify)
    asked = Profile(profile) if profile else None
    if arrivals is not None:
        if vcpus is not None or apply is not None:
            raise ConfigError("--arrivals takes its VMs from the file: no --vcpus or --apply")
        _fleet(arrivals, load_topology(model, file), options, level, asked, json_out)
        return
    if apply is not None:
        if vcpus is not None or model is not None or file is not None:
            raise ConfigError(
                "--apply DOMAIN places the domain as it is defined, on this "
                "host: no --vcpus, --model or --file"
            )
        if connect == "none":
            raise ConfigError("--apply needs libvirt: not --connect none")
        _apply(apply, connect, options, level, asked, state_dir, json_out)
        return
    if vcpus is None or not 1 <= vcpus <= MAX_VCPUS:
        raise ConfigError(f"--vcpus must be within 1..{MAX_VCPUS}")
    if memory < 0:
        raise ConfigError("--memory must not be negative")
    topo = load_topology(model, file)
    request = VmRequest(name, vcpus, memory, asked, flavor)
    if model is not None or file is not None:
        placed: tuple[PlacedVm, ...] = ()
        basis = "an idle machine model"
        support = _support(None)
        placement = place_vm(topo, request, placed, options, level)
    else:
        with _libvirt(connect) as conn:
            placed, basis = _live_state(conn, topo, level, state_dir, name)
            support = _support(conn)
        placement = place_vm(topo, request, placed, options, level)
    _report(topo, level, basis, placement, support, None, json_out)


# Section: the three uses -----------------------------------------------------------------


def _apply(
    domain: str,
    uri: str,
    options: PlaceOptions,
    level: Unify,
    asked: Profile | None,
    state_dir: Path,
    json_out: bool,
) -> None:
    from unicache.host.libvirt.placement import apply_to_defined

    topo = load_topology(None, None)
    with _libvirt(uri, required=True) as conn:
        placed, basis = _live_state(conn, topo, level, state_dir, None)
        support = _support(conn)
        # the domain's own metadata (an earlier --apply) is in ``placed``' view of it only
        # when it runs; read it from its definition so that placing again keeps it
        own = _own_placement(conn, domain, topo, level)

        def compute(request: VmRequest) -> Placement:
            return place_vm(topo, request, (*placed, *own), options, level)

        placement = apply_to_defined(conn, domain, compute, support, asked)
    _report(topo, level, basis, placement, support, domain, json_out)


def _fleet(
    path: Path,
    topo: Topology,
    options: PlaceOptions,
    level: Unify,
    asked: Profile | None,
    json_out: bool,
) -> None:
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read arrivals {path}") from err
    fleet = parse_arrivals(text, str(path))
    if asked is not None:  # --profile: for the arrivals that name none
        fleet = tuple(
            a if a.request.profile else replace(a, request=replace(a.request, profile=asked))
            for a in fleet
        )
    result = place_fleet(topo, fleet, options, level)
    if json_out:
        print(json.dumps(_fleet_json(topo, level, options, result), indent=2))
        return
    _fleet_tables(topo, level, options, result)


# Section: the live host ------------------------------------------------------------------


@contextlib.contextmanager
def _libvirt(uri: str, required: bool = False) -> Iterator[Any]:
    """An open libvirt connection, or ``None`` (``--connect none``, no libvirt-python, no
    libvirtd) unless ``required``."""
    from unicache.host.libvirt.binding import _quiet_errors, libvirt

    if uri == "none" or libvirt is None:
        if required:
            raise ConfigError("--apply needs libvirt-python")
        yield None
        return
    libvirt.registerErrorHandler(_quiet_errors, None)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as err:
        if required:
            raise ConfigError(f"cannot connect to libvirt at {uri}") from err
        yield None
        return
    try:
        yield conn
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()


def _live_state(
    conn: Any, topo: Topology, level: Unify, state_dir: Path, exclude: str | None
) -> tuple[tuple[PlacedVm, ...], str]:
    from unicache.host.libvirt.placement import placed_from_libvirt
    from unicache.host.placestate import load_status, merge_placed, placed_from_status

    units = topo.units(level)
    status = load_status(state_dir)
    from_status = placed_from_status(status, units, exclude) if status else ()
    from_libvirt = placed_from_libvirt(conn, units, exclude) if conn is not None else ()
    parts = [f"the daemon's weights at tick {status.get('tick')}" if status else "no daemon status"]
    parts.append(
        f"{len(from_libvirt)} running libvirt domains" if conn is not None else "no libvirt"
    )
    return merge_placed(from_status, from_libvirt), f"this host ({', '.join(parts)})"


def _own_placement(conn: Any, domain: str, topo: Topology, level: Unify) -> tuple[PlacedVm, ...]:
    import xml.etree.ElementTree as ET

    from unicache.host.libvirt.binding import libvirt
    from unicache.host.libvirt.placement import read_metadata

    try:
        dom = conn.lookupByName(domain)
        text = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    except libvirt.libvirtError:
        return ()
    kept = read_metadata(ET.fromstring(text))
    if kept is None:
        return ()
    return (PlacedVm(domain, kept.request.kind, (), (), (), kept),)


def _support(conn: Any) -> Any:
    from unicache.host.libvirt.placement import probe_topology_support

    return probe_topology_support(conn)


# Section: output -------------------------------------------------------------------------


def _report(
    topo: Topology,
    level: Unify,
    basis: str,
    p: Placement,
    support: Any,
    applied: str | None,
    json_out: bool,
) -> None:
    from unicache.host.libvirt.placement import placement_fragment

    fragment = placement_fragment(p, support)
    if json_out:
        data: dict[str, Any] = {"machine": topo.name, "unify": str(level), "basis": basis}
        data.update(placement_to_dict(p))
        data["node"] = p.nodes[0] if len(p.nodes) == 1 else None
        data["guest_topology_support"] = support.line
        data["libvirt_xml"] = fragment
        data["applied"] = applied
        print(json.dumps(data, indent=2))
        return
    out.print(
        f"[bold]{topo.name}[/bold] (--unify {level}), from {basis}: {p.reason}", highlight=False
    )
    table = Table("cell", "node", "die", "LLC group", "cpus", "vCPUs", "reason")
    node_of = {c.id: c.node for c in p.cells}
    for d in p.dies:
        table.add_row(
            str(d.cell),
            str(node_of[d.cell]),
            str(d.die),
            str(d.unit),
            format_list(d.cpus),
            format_list(d.vcpus),
            d.reason,
        )
    out.print(table)
    for i, reason in enumerate(p.reasons, 1):
        out.print(f"{i:2}. {reason}", highlight=False, markup=False)
    out.print(support.line, highlight=False, markup=False)
    if applied:
        out.print(
            f"applied to the definition of {applied} (starts with it next time)", highlight=False
        )
    out.print(fragment, highlight=False, markup=False)


def _fleet_json(
    topo: Topology, level: Unify, options: PlaceOptions, result: FleetResult
) -> dict[str, Any]:
    return {
        "machine": topo.name,
        "unify": str(level),
        "cpu_overcommit": options.cpu_overcommit,
        "placed": [placement_to_dict(p) for p in result.placed],
        "refused": [
            {
                "name": r.request.name,
                "flavor": r.request.kind,
                "vcpus": r.request.vcpus,
                "memory_mib": r.request.memory_mib,
                "kind": r.kind,
                "reason": r.reason,
            }
            for r in result.refused
        ],
        "groups": [
            {
                "unit": g.unit,
                "node": g.node,
                "cpus": g.cpus,
                "vcpus": round(g.vcpus, 3),
                "slots": round(g.slots, 3),
                "cache_load": round(g.cache_load, 4),
            }
            for g in result.groups
        ],
        "nodes": [
            {
                "node": n.node,
                "cpus": n.cpus,
                "vcpus": round(n.vcpus, 3),
                "slots": round(n.slots, 3),
                "memory_mib": round(n.memory_mib),
                "memory_capacity_mib": round(n.memory_capacity_mib),
            }
            for n in result.nodes
        ],
    }


def _fleet_tables(topo: Topology, level: Unify, options: PlaceOptions, result: FleetResult) -> None:
    out.print(
        f"[bold]{topo.name}[/bold] (--unify {level}, cpu_overcommit "
        f"{options.cpu_overcommit:g}): {len(result.placed)} placed, "
        f"{len(result.refused)} refused",
        highlight=False,
    )
    placed = Table("VM", "flavor", "vCPUs", "MiB", "profile", "nodes", "LLC groups", "guest")
    for p in result.placed:
        t = p.topology
        placed.add_row(
            p.request.name,
            p.request.kind,
            str(p.request.vcpus),
            str(p.request.memory_mib),
            str(p.profile),
            format_list(p.nodes),
            ",".join(str(u) for u in p.units),
            f"{t.sockets}x{t.dies}x{t.cores}",
        )
    out.print(placed)
    if result.refused:
        refused = Table("refused", "kind", "reason")
        for r in result.refused:
            refused.add_row(r.request.name, r.kind, r.reason)
        out.print(refused)
    groups = Table("LLC group", "node", "cpus", "vCPUs", "slots", "cache load")
    for g in result.groups:
        groups.add_row(
            str(g.unit),
            str(g.node),
            str(g.cpus),
            f"{g.vcpus:g}",
            f"{g.slots:g}",
            f"{g.cache_load:.3g}",
        )
    out.print(groups)
    nodes = Table("node", "cpus", "vCPUs", "slots", "memory MiB", "of MiB")
    for n in result.nodes:
        nodes.add_row(
            str(n.node),
            str(n.cpus),
            f"{n.vcpus:g}",
            f"{n.slots:g}",
            f"{n.memory_mib:.0f}",
            f"{n.memory_capacity_mib:.0f}",
        )
    out.print(nodes)
