"""The ``unicache`` command line: topology, models and replay (more commands join later).

Every command has ``--json``; humans get tables. A user error (bad flag value, unreadable
file, unknown model) is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console
from rich.table import Table

from unicache import __version__
from unicache.cpulist import format_list
from unicache.decisionlog import action_record, chunk_record, refusal_record
from unicache.errors import ConfigError, StateError, UnicacheError
from unicache.host.machine import load_topology
from unicache.host.replay import ReplayHost
from unicache.loop import run_rounds
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.statefile import status_checkpoint
from unicache.topofile import model_names
from unicache.topology import Topology, Unify
from unicache.trace import read_trace

log = logging.getLogger(__name__)

app = typer.Typer(
    name="unicache",
    help=(
        "unicache: make a host's fragmented last-level caches and NUMA memory serve "
        "virtual machines like one large shared cache."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# tables stay readable when piped (rich would otherwise squeeze them into 80 columns)
_out = Console(width=None if sys.stdout.isatty() else 200)
_err = Console(stderr=True)

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="A shipped machine model (see `unicache models`)."),
]
FileOpt = Annotated[Path | None, typer.Option("--file", "-f", help="A TOML machine model file.")]
_UNIFY_CHOICE = click.Choice([str(u) for u in Unify])
UnifyOpt = Annotated[
    str,
    typer.Option(
        "--unify",
        click_type=_UNIFY_CHOICE,
        help="Cache unit: 'llc' = one LLC group, 'l2' = one core with its private caches.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _kib(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n // 1024} KiB"


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


@app.command()
def topology(
    model: ModelOpt = None,
    file: FileOpt = None,
    unify: UnifyOpt = "llc",
    json_out: JsonOpt = False,
    save: Annotated[
        Path | None, typer.Option("--save", help="Also write the topology as a TOML model.")
    ] = None,
) -> None:
    """Show a machine's LLC groups, cache levels, NUMA nodes and cache units.

    Without --model or --file it reads this machine's sysfs and reports only what sysfs
    says: latencies and bandwidths are not in sysfs and show as unknown.
    """
    from unicache.topofile import dump_toml

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
    _out.print(f"[bold]{topo.name}[/bold]: {topo.description}")
    _out.print(f"source: {topo.source}")
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
            _kib(lv.size_bytes),
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
    _out.print(levels)
    groups = Table("LLC group", "cpus", "socket", "node", title="LLC groups")
    for g in topo.llc_groups():
        groups.add_row(str(g.id), format_list(g.cpus), str(g.socket), str(g.node))
    _out.print(groups)
    nodes = Table("node", "cpus", "memory", "distances", "DRAM latency", title="NUMA nodes")
    for n in topo.nodes:
        nodes.add_row(
            str(n.id),
            format_list(n.cpus) or "-",
            _kib(n.memory_bytes),
            " ".join(map(str, n.distances)),
            "unknown" if n.dram_latency_cycles is None else f"{n.dram_latency_cycles} cycles",
        )
    _out.print(nodes)
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
            str(u.id), format_list(u.cpus), _kib(u.capacity_bytes), str(u.llc_group), str(u.node)
        )
    _out.print(units)
    if len(topo.units(level)) < 2:
        _out.print(
            f"note: only one cache unit with --unify {level}: nothing to unify "
            "(try --unify l2 on a machine with one LLC)"
        )


@app.command()
def models(json_out: JsonOpt = False) -> None:
    """List the shipped machine models."""
    from unicache.topofile import load_model

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
    _out.print(table)


@app.command()
def replay(
    trace: Annotated[Path, typer.Option("--trace", "-t", help="Observation trace (JSON lines).")],
    model: ModelOpt = None,
    file: FileOpt = None,
    unify: Annotated[
        str | None,
        typer.Option(
            "--unify",
            click_type=_UNIFY_CHOICE,
            help="Cache unit (default: the trace header's, else llc).",
        ),
    ] = None,
    json_out: JsonOpt = False,
    chunks: Annotated[
        bool, typer.Option("--chunks", help="Also show every per-chunk decision.")
    ] = False,
) -> None:
    """Feed a recorded observation trace through the policies and print their actions.

    The machine is --model/--file, else the model named in the trace header, else this
    host. Malformed trace lines are reported with their line number and skipped.
    """
    parsed = read_trace(trace)
    if model is None and file is None:
        model = parsed.header.model
    topo = load_topology(model, file)
    level = Unify(unify or parsed.header.unify or "llc")
    policy = UnicachePolicy(topo, level)
    for number, why in parsed.skipped:
        sys.stderr.write(f"{trace}:{number}: skipped: {why}\n")
    if policy.scu.options.cost_source != "model":
        _err.print(
            f"note: {topo.name} has no figures for SCU costs; using "
            f"{policy.scu.options.cost_source} (see docs/policies.md)",
            highlight=False,
        )
    host = ReplayHost(parsed, frozenset(c.cpu for c in topo.cpus))
    records: list[dict[str, Any]] = []
    chunk_records: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    refusals: list[dict[str, Any]] = []
    rules: Counter[str] = Counter()
    for rnd in run_rounds(host, policy, RoundState()):
        records.extend(action_record(rnd.tick, a) for a in rnd.decision.actions)
        refusals.extend(refusal_record(rnd.tick, r) for r in rnd.decision.refusals)
        chunk_records.extend(chunk_record(rnd.tick, d) for d in rnd.decision.chunk_decisions)
        rules.update(d.rule for d in rnd.decision.chunk_decisions)
        failures.extend(
            {**action_record(rnd.tick, a), "error": why} for a, why in rnd.result.failed
        )
    opts = policy.scu.options
    if json_out:
        print(
            json.dumps(
                {
                    "model": topo.name,
                    "unify": str(level),
                    "units": len(policy.units),
                    "scu": {
                        "min_read_size": opts.params.min_read_size,
                        "chunk_size": opts.chunk_size,
                        "busy_threshold": opts.params.busy_threshold,
                        "idle_threshold": opts.params.idle_threshold,
                        "cost_source": opts.cost_source,
                    },
                    "skipped": [{"line": n, "why": w} for n, w in parsed.skipped],
                    "actions": records,
                    "chunk_decisions": chunk_records,
                    "rules": dict(sorted(rules.items())),
                    "refusals": refusals,
                    "failed": failures,
                },
                indent=1,
            )
        )
        return
    _out.print(
        f"[bold]{topo.name}[/bold], --unify {level}: {len(policy.units)} units; "
        f"min_read_size {opts.params.min_read_size} B, chunk size {_kib(opts.chunk_size)}"
    )
    table = Table("tick", "action", "target", "detail", "reason", title="actions")
    for rec in records:
        table.add_row(str(rec["tick"]), rec["kind"], rec["target"], _detail(rec), rec["reason"])
    _out.print(table)
    if refusals:
        # what a policy chose not to do, and why (SCU stepping aside where it predicts no gain)
        rtable = Table("tick", "refusal", "reason", title="left alone")
        for rec in refusals:
            rtable.add_row(str(rec["tick"]), rec["refusal"], rec["reason"])
        _out.print(rtable)
    if chunks:
        ctable = Table("tick", "vm", "chunk", "unit", "load", "rule", title="chunk decisions")
        for rec in chunk_records:
            ctable.add_row(
                str(rec["tick"]),
                rec["vm"],
                f"{rec['file']}:{rec['chunk']}",
                str(rec["unit"]),
                "caching" if rec["caching"] else "non-caching",
                rec["rule"],
            )
        _out.print(ctable)
    summary = Table("Figure 2 rule", "decisions", title="chunk decisions by rule")
    for rule, n in sorted(rules.items()):
        summary.add_row(rule, str(n))
    _out.print(summary)
    for fail in failures:
        _err.print(f"failed: {fail['target']}: {fail['error']}", highlight=False)


def _detail(rec: dict[str, Any]) -> str:
    if rec["kind"] == "pin-vcpu":
        return f"cpus {rec['cpus']} (unit {rec['unit']})"
    if rec["kind"] == "release-vcpu":
        return "back on the CPUs it had before unicache"
    if rec["kind"] == "set-cpu-weight":
        return f"cpu.weight {rec['weight']}"
    if rec["kind"] == "assign-color":
        return f"chunks {rec['chunks']} -> color {rec['color']} (guest node {rec['color_node']})"
    if rec["kind"] in ("replicate", "drop-replica"):
        return f"chunk {rec['chunk']} on guest node {rec['node']}"
    entries = rec.get("entries", [])
    cached = sum(1 for e in entries if e["caching"])
    colored = sum(1 for e in entries if e.get("color_node", -1) >= 0)
    replicated = sum(1 for e in entries if e.get("replica_nodes"))
    extra = f", {colored} colored" if colored else ""
    extra += f", {replicated} replicated" if replicated else ""
    return f"v{rec['version']}: {cached} cached, {len(entries) - cached} non-caching{extra}"


@app.command()
def run(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML config (see docs/operations.md).")
    ] = None,
    unify: Annotated[
        str | None, typer.Option("--unify", click_type=_UNIFY_CHOICE, help="Cache unit.")
    ] = None,
    interval: Annotated[
        float | None, typer.Option("--interval", help="Seconds between rounds.")
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="Journals, sockets, VM registry.")
    ] = None,
    decision_log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            help="Decision log, JSON lines (default: /var/log/unicache/decisions.jsonl, or "
            "STATE_DIR/decisions.jsonl with another --state-dir).",
        ),
    ] = None,
    log_chunks: Annotated[
        bool,
        typer.Option(
            "--log-chunks",
            help="Log every chunk of every guest report and every chunk decision (default: "
            "a summary per report and the rules per VM; a guest decides how many chunks).",
        ),
    ] = False,
    log_max_mib: Annotated[
        int | None,
        typer.Option(
            "--log-max-mib",
            help="Rotate the decision log at this size, keeping 3 old files (default 64).",
            min=1,
            max=1 << 20,
        ),
    ] = None,
    attach: Annotated[
        list[str] | None,
        typer.Option(
            "--attach",
            help="Manage a QEMU process started elsewhere: NAME=PID[:AGENT_SOCKET] "
            "(repeatable; its vCPU threads are found by name, needs debug-threads=on).",
        ),
    ] = None,
    rounds: Annotated[
        int | None, typer.Option("--rounds", help="Stop after N rounds (default: run forever).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Decide and log, change nothing.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not echo decisions.")] = False,
    always_place: Annotated[
        bool,
        typer.Option(
            "--always-place",
            help="SCU places every VM and SRM colors every stream, without their cost "
            "models and watches: to check the mechanisms on a host where they cannot gain "
            "(one LLC, --unify l2, no LLC counters). Never slower no longer holds.",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", help="Serve Prometheus metrics on 127.0.0.1:PORT."),
    ] = None,
    connect: Annotated[
        str | None,
        typer.Option("--connect", help="libvirt URI (default: qemu:///system if reachable, "
                     "else unicache's own QEMU VMs; 'none': unicache's own QEMU only)."),
    ] = None,
) -> None:
    """Run the daemon: observe -> decide -> act -> log, every interval.

    Restores every affinity and weight it changed on exit (SIGTERM, SIGINT) and, after a
    crash, at its next start. Uses the VMs unicache started (`unicache vm start`) unless
    --attach names QEMU processes.
    """
    import asyncio

    from unicache.daemon import load_config, run_daemon, with_overrides
    from unicache.host.procfs_source import ProcessVmSource, parse_attach

    cfg = with_overrides(
        load_config(config),
        unify=Unify(unify) if unify else None,
        interval_s=interval,
        state_dir=state_dir,
        decision_log=decision_log,
        log_max_mib=log_max_mib,
        log_chunks=log_chunks or None,
        rounds=rounds,
        dry_run=dry_run or None,
        always_place=always_place or None,
        metrics_port=metrics_port,
        connect=connect,
    )
    if cfg.rounds is not None and cfg.rounds < 1:
        raise ConfigError("--rounds must be at least 1")
    source = ProcessVmSource([parse_attach(a) for a in attach]) if attach else None
    code = asyncio.run(run_daemon(cfg, source, echo=None if quiet else sys.stdout))
    raise typer.Exit(code)


@app.command()
def place(
    vcpus: Annotated[int, typer.Option("--vcpus", help="vCPUs of the new VM.")],
    memory: Annotated[
        int, typer.Option("--memory", help="Its memory in MiB (0: no NUMA advice).")
    ] = 0,
    model: ModelOpt = None,
    file: FileOpt = None,
    unify: UnifyOpt = "llc",
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="Where a running daemon writes status.json.")
    ] = Path("/run/unicache"),
    json_out: JsonOpt = False,
) -> None:
    """Propose cache units and cpusets for a new VM, with the libvirt XML fragment.

    On this host it uses the running daemon's cache loads (STATE_DIR/status.json); with
    --model, or without a daemon, every unit starts idle.
    """
    from unicache.policy.place import UnitLoad, libvirt_fragment, place_vm

    if vcpus < 1 or vcpus > 4096:
        raise ConfigError("--vcpus must be within 1..4096")
    if memory < 0:
        raise ConfigError("--memory must not be negative")
    topo = load_topology(model, file)
    level = Unify(unify)
    units = topo.units(level)
    loads = {u.id: UnitLoad(u) for u in units}
    basis = "an idle machine model" if model or file else "an idle host (no daemon status)"
    checkpoint = status_checkpoint(state_dir)
    status = None
    if model is None and file is None:
        try:
            status = checkpoint.load()
        except StateError as err:
            raise ConfigError(f"cannot read daemon status: {err.error_message}") from err
    if status is not None and status.get("unify") == str(level):
        for entry in status.get("units", []):
            unit_id = entry.get("id")
            if unit_id in loads:
                loads[unit_id] = UnitLoad(
                    loads[unit_id].unit, float(entry.get("cache_load", 0.0)),
                    int(entry.get("vcpus", 0)),
                )
        basis = f"the daemon's loads at tick {status.get('tick')}"
    proposal = place_vm(
        tuple(loads.values()), vcpus, memory * 1024 * 1024, nodes=topo.nodes
    )
    fragment = libvirt_fragment(proposal)
    if json_out:
        print(json.dumps({
            "machine": topo.name,
            "unify": str(level),
            "basis": basis,
            "vcpus": [
                {"vcpu": p.vcpu, "unit": p.unit, "cpus": format_list(p.cpus), "reason": p.reason}
                for p in proposal.vcpus
            ],
            "emulator_cpus": format_list(proposal.emulator_cpus),
            "node": proposal.node,
            "reason": proposal.reason,
            "libvirt_xml": fragment,
        }, indent=2))
        return
    _out.print(f"[bold]{topo.name}[/bold] (--unify {level}), from {basis}: {proposal.reason}")
    table = Table("vCPU", "unit", "cpus", "reason")
    for p in proposal.vcpus:
        table.add_row(str(p.vcpu), str(p.unit), format_list(p.cpus), p.reason)
    _out.print(table)
    _out.print(fragment, highlight=False, markup=False)


StateDirOpt = Annotated[
    Path, typer.Option("--state-dir", help="The daemon's state directory.")
]


@app.command()
def status(
    state_dir: StateDirOpt = Path("/run/unicache"),
    json_out: JsonOpt = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Refresh every second until Ctrl-C.")
    ] = False,
) -> None:
    """Show units, vCPUs, weights and the last actions of the running daemon."""
    from unicache.readback import read_log, read_status

    def render() -> Table:
        data = read_status(state_dir)
        table = Table("unit", "cpus", "load", "vCPUs", "assigned", "capacity",
                      title=f"tick {data['tick']} (--unify {data['unify']})")
        for u in data["units"]:
            table.add_row(str(u["id"]), u["cpus"], f"{u['cache_load']:.3g}", str(u["vcpus"]),
                          _kib(u["assigned_bytes"]), _kib(u["capacity_bytes"]))
        for v in data["vcpus"]:
            table.add_row(f"{v['vm']}/vcpu{v['vcpu']}", "", f"{v['cache_weight']:.3g}",
                          f"unit {v['unit']}", v["source"] or "-", "")
        return table

    if json_out:
        data = read_status(state_dir)
        log_path = state_dir / "decisions.jsonl"
        data["last_actions"] = [
            r for r in read_log(log_path, 50) if r.get("kind") not in ("chunk-decision",)
        ][-20:] if log_path.exists() else []
        print(json.dumps(data, indent=2))
        return
    if not watch:
        _out.print(render())
        return
    import time

    from rich.live import Live

    with Live(render(), console=_out, refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(1.0)
                live.update(render())
        except KeyboardInterrupt:
            return


@app.command()
def explain(
    vm: Annotated[str, typer.Argument(help="The VM.")],
    vcpu: Annotated[int | None, typer.Argument(help="One of its vCPUs.")] = None,
    state_dir: StateDirOpt = Path("/run/unicache"),
    decision_log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            help="Decision log (default: /var/log/unicache/decisions.jsonl with the default "
            "state directory, else STATE_DIR/decisions.jsonl).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Why a VM's vCPUs sit where they sit, from the decision log."""
    from unicache.daemon import default_decision_log
    from unicache.readback import explain as explain_vm
    from unicache.readback import read_log

    found = explain_vm(read_log(decision_log or default_decision_log(state_dir)), vm, vcpu)
    if json_out:
        print(json.dumps({
            "vm": found.vm, "vcpus": found.vcpus, "history": found.history,
            "placement": found.placement, "rules": found.rules,
            "colors": found.colors, "replicas": found.replicas,
        }, indent=2))
        return
    for index, rec in sorted(found.vcpus.items()):
        where = f"on cpus {rec['cpus']} (unit {rec['unit']})" if "cpus" in rec else (
            "on its own CPUs (released)")
        _out.print(f"{vm}/vcpu{index} {where} since tick {rec['tick']}: {rec['reason']}",
                   highlight=False)
    if len(found.history) > len(found.vcpus):
        table = Table("tick", "action", "detail", "reason", title="history")
        for rec in found.history:
            table.add_row(str(rec["tick"]), rec["kind"], _detail(rec), rec["reason"])
        _out.print(table)
    if found.placement is not None:
        _out.print(f"placement table v{found.placement['version']}: "
                   f"{len(found.placement['entries'])} chunks — {found.placement['reason']}",
                   highlight=False)
    for rule, count in sorted(found.rules.items()):
        _out.print(f"  {rule}: {count} chunk decisions", highlight=False)
    for title, records in (("colors (SRM-buffer)", found.colors[-10:]),
                           ("replicas (NCC)", found.replicas[-10:])):
        if records:
            table = Table("tick", "action", "detail", "reason", title=f"last {title}")
            for rec in records:
                table.add_row(str(rec["tick"]), rec["kind"], _detail(rec), rec["reason"])
            _out.print(table)


@app.command()
def version() -> None:
    """Print the version."""
    print(__version__)


def _mount_optional() -> None:
    # sub-command groups owned by other parts of the tree, mounted when present
    import importlib

    for module, name, text in (
        ("unicache.cli_bench", "bench", "Benchmarks (shim, ...)."),
        ("unicache.cli_vm", "vm", "Start, stop and list VMs run by unicache's own QEMU."),
    ):
        try:
            sub = importlib.import_module(module)
        except ImportError:
            continue
        app.add_typer(sub.app, name=name, help=text)
    from contextlib import suppress

    with suppress(ImportError):  # top-level commands: attach, install-hook, remove-hook
        importlib.import_module("unicache.cli_libvirt").register(app)


_mount_optional()


def main() -> None:
    """Console entry point: one line and exit 2 on a user error, never a traceback."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        # without standalone mode click returns typer.Exit's code instead of exiting
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except UnicacheError as err:
        # plain write: one line, never wrapped to the terminal width
        sys.stderr.write(f"unicache: error: {err}\n")
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _err.print("unicache: aborted", highlight=False)
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in standalone_mode=False
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
