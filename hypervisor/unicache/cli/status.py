"""``unicache status`` and ``unicache explain``: the running daemon's status, and why it acted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from unicache.cli.common import (
    JsonOpt,
    app,
    kib,
    out,
)
from unicache.readback import record_detail

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
    """Show units, vCPUs and weights of the running daemon (--json: and its last actions)."""
    from unicache.config import default_decision_log
    from unicache.readback import read_log, read_status

    def render() -> Table:
        data = read_status(state_dir)
        table = Table("unit", "cpus", "load", "vCPUs", "assigned", "capacity",
                      title=f"tick {data['tick']} (--unify {data['unify']})")
        for u in data["units"]:
            table.add_row(str(u["id"]), u["cpus"], f"{u['cache_load']:.3g}", str(u["vcpus"]),
                          kib(u["assigned_bytes"]), kib(u["capacity_bytes"]))
        for v in data["vcpus"]:
            table.add_row(f"{v['vm']}/vcpu{v['vcpu']}", "", f"{v['cache_weight']:.3g}",
                          f"unit {v['unit']}", v["source"] or "-", "")
        return table

    if json_out:
        data = read_status(state_dir)
        # where the daemon writes it: /var/log/unicache for the default state directory
        log_path = default_decision_log(state_dir)
        data["last_actions"] = [
            r for r in read_log(log_path, 50) if r.get("kind") not in ("chunk-decision",)
        ][-20:] if log_path.exists() else []
        print(json.dumps(data, indent=2))
        return
    if not watch:
        out.print(render())
        return
    import time

    from rich.live import Live

    with Live(render(), console=out, refresh_per_second=2) as live:
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
    from unicache.config import default_decision_log
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
        out.print(f"{vm}/vcpu{index} {where} since tick {rec['tick']}: {rec['reason']}",
                   highlight=False)
    if len(found.history) > len(found.vcpus):
        table = Table("tick", "action", "detail", "reason", title="history")
        for rec in found.history:
            table.add_row(str(rec["tick"]), rec["kind"], record_detail(rec), rec["reason"])
        out.print(table)
    if found.placement is not None:
        out.print(f"placement table v{found.placement['version']}: "
                   f"{len(found.placement['entries'])} chunks — {found.placement['reason']}",
                   highlight=False)
    for rule, count in sorted(found.rules.items()):
        out.print(f"  {rule}: {count} chunk decisions", highlight=False)
    for title, records in (("colors (SRM-buffer)", found.colors[-10:]),
                           ("replicas (NCC)", found.replicas[-10:])):
        if records:
            table = Table("tick", "action", "detail", "reason", title=f"last {title}")
            for rec in records:
                table.add_row(str(rec["tick"]), rec["kind"], record_detail(rec), rec["reason"])
            out.print(table)
