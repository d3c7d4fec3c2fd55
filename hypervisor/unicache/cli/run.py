"""``unicache run``: the daemon (``unicache place`` is :mod:`unicache.cli.place`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from unicache.cli.common import UNIFY_CHOICE, app
from unicache.errors import ConfigError
from unicache.topology import Unify

#: the options of ``run``, one alias each (the command's signature stays short)
_RunConfig = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML config (see docs/operations.md).")
]
_RunUnify = Annotated[
    str | None, typer.Option("--unify", click_type=UNIFY_CHOICE, help="Cache unit.")
]
_RunInterval = Annotated[float | None, typer.Option("--interval", help="Seconds between rounds.")]
_RunStateDir = Annotated[
    Path | None, typer.Option("--state-dir", help="Journals, sockets, VM registry.")
]
_RunDecisionLog = Annotated[
    Path | None,
    typer.Option(
        "--log",
        help="Decision log, JSON lines (default: /var/log/unicache/decisions.jsonl, or "
        "STATE_DIR/decisions.jsonl with another --state-dir).",
    ),
]
_RunLogChunks = Annotated[
    bool,
    typer.Option(
        "--log-chunks",
        help="Log every chunk of every guest report and every chunk decision (default: "
        "a summary per report and the rules per VM; a guest decides how many chunks).",
    ),
]
_RunLogMaxMib = Annotated[
    int | None,
    typer.Option(
        "--log-max-mib",
        help="Rotate the decision log at this size, keeping 3 old files (default 64).",
        min=1,
        max=1 << 20,
    ),
]
_RunAttach = Annotated[
    list[str] | None,
    typer.Option(
        "--attach",
        help="Manage a QEMU process started elsewhere: NAME=PID[:AGENT_SOCKET] "
        "(repeatable; its vCPU threads are found by name, needs debug-threads=on).",
    ),
]
_RunRounds = Annotated[
    int | None, typer.Option("--rounds", help="Stop after N rounds (default: run forever).")
]
_RunDryRun = Annotated[bool, typer.Option("--dry-run", help="Decide and log, change nothing.")]
_RunQuiet = Annotated[bool, typer.Option("--quiet", "-q", help="Do not echo decisions.")]
_RunJsonOut = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Echo every decision-log record as its JSON line (one "
        "object per line, as the log holds it) instead of a human line.",
    ),
]
_RunAlwaysPlace = Annotated[
    bool,
    typer.Option(
        "--always-place",
        help="SCU places every VM, SRM colors every stream, NCC replicates every chunk "
        "read twice remotely and OBS pins every vCPU, without their cost models, watches "
        "and step-asides: to check the mechanisms on a host where they cannot gain (one "
        "LLC, --unify l2, one NUMA node, no LLC counters). Never slower no longer holds.",
    ),
]
_RunMetricsPort = Annotated[
    int | None,
    typer.Option("--metrics-port", help="Serve Prometheus metrics on 127.0.0.1:PORT."),
]
_RunConnect = Annotated[
    str | None,
    typer.Option(
        "--connect",
        help="libvirt URI (default: qemu:///system if reachable, "
        "else unicache's own QEMU VMs; 'none': unicache's own QEMU only).",
    ),
]


@app.command()
def run(
    config: _RunConfig = None,
    unify: _RunUnify = None,
    interval: _RunInterval = None,
    state_dir: _RunStateDir = None,
    decision_log: _RunDecisionLog = None,
    log_chunks: _RunLogChunks = False,
    log_max_mib: _RunLogMaxMib = None,
    attach: _RunAttach = None,
    rounds: _RunRounds = None,
    dry_run: _RunDryRun = False,
    quiet: _RunQuiet = False,
    json_out: _RunJsonOut = False,
    always_place: _RunAlwaysPlace = False,
    metrics_port: _RunMetricsPort = None,
    connect: _RunConnect = None,
) -> None:
    """Run the daemon: observe -> decide -> act -> log, every interval.

    Restores every affinity and weight it changed on exit (SIGTERM, SIGINT) and, after a
    crash, at its next start. Uses the VMs unicache started (`unicache vm start`) unless
    --attach names QEMU processes.
    """
    import asyncio

    from unicache.config import load_config, with_overrides
    from unicache.daemon import run_daemon
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
    code = asyncio.run(
        run_daemon(cfg, source, echo=None if quiet else sys.stdout, echo_json=json_out)
    )
    raise typer.Exit(code)
