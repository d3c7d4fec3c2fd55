"""``unicache run`` (the daemon) and ``unicache place`` (where a new VM would go)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from unicache.cli.common import (
    UNIFY_CHOICE,
    FileOpt,
    JsonOpt,
    ModelOpt,
    UnifyOpt,
    app,
    out,
)
from unicache.cpulist import format_list
from unicache.errors import ConfigError, StateError
from unicache.statefile import status_checkpoint
from unicache.topology import Unify
from unicache.topology.sysfs import load_topology


@app.command()
def run(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML config (see docs/operations.md).")
    ] = None,
    unify: Annotated[
        str | None, typer.Option("--unify", click_type=UNIFY_CHOICE, help="Cache unit.")
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
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Echo every decision-log record as its JSON line (one "
                     "object per line, as the log holds it) instead of a human line."),
    ] = False,
    always_place: Annotated[
        bool,
        typer.Option(
            "--always-place",
            help="SCU places every VM, SRM colors every stream and OBS pins every vCPU, "
            "without their cost models, watches and step-asides: to check the mechanisms on "
            "a host where they cannot gain (one LLC, --unify l2, no LLC counters). Never "
            "slower no longer holds.",
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
    code = asyncio.run(run_daemon(cfg, source, echo=None if quiet else sys.stdout,
                                  echo_json=json_out))
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
    out.print(f"[bold]{topo.name}[/bold] (--unify {level}), from {basis}: {proposal.reason}")
    table = Table("vCPU", "unit", "cpus", "reason")
    for p in proposal.vcpus:
        table.add_row(str(p.vcpu), str(p.unit), format_list(p.cpus), p.reason)
    out.print(table)
    out.print(fragment, highlight=False, markup=False)
