"""``unicache-sim dmc``: the DMC paper's microbenchmarks and SCU on DMC hardware, a
what-if (cpush, cllookup and cmsg do not exist in any processor)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from unicache.errors import UnicacheError

from unicache_sim.cli.common import user_error
from unicache_sim.cli.output import emit_json, note_plots, progress_steps
from unicache_sim.experiments.dmc.costs import PAPER_COSTS
from unicache_sim.experiments.dmc.runs import run_micro
from unicache_sim.experiments.scu_on_dmc import (
    DEFAULT_SCU_POINTS,
    DmcReport,
    run_scu,
    steps,
)

#: the paper's values (DMC §6.1-§6.3): what each figure's row is compared with
PAPER_SCAN_FASTER = {1: 0.0, 2: 0.17, 8: 0.52}
PAPER_TRIP = {0: 2202.0, 6: 831.0}
PAPER_LIST_FASTER = {1: 0.22}


#: the default SCU runs (the modern models take minutes each: opt in with --scu)
_DEFAULT_SCU = ",".join(f"{name}:{mib:g}" for name, mib in DEFAULT_SCU_POINTS.items())


def _points(text: str) -> dict[str, float]:
    points: dict[str, float] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        model, _, ws = item.partition(":")
        try:
            points[model] = float(ws) if ws else DEFAULT_SCU_POINTS.get(model, 16.0)
        except ValueError as err:
            raise UnicacheError(f"--scu wants MODEL[:MiB],..., not {item!r}") from err
        if points[model] <= 0:
            raise UnicacheError(f"--scu: the working set of {model} must be positive")
    return points


def dmc(
    scu: Annotated[
        str,
        typer.Option(
            help="SCU what-if runs, MODEL[:working set MiB],...; '' for none. Each runs the "
            "MFC read experiment on the product's path with today's migration, cpush 'push' "
            "(the OS hop stays, the refill is pushed), cpush 'handoff' (DMC §6.2's run-queue "
            "hand-off) and handoff plus cllookup in the shim"
        ),
    ] = _DEFAULT_SCU,
    seeds: Annotated[int, typer.Option(help="seeds of the list benchmark (Figure 5)")] = 5,
    scu_seeds: Annotated[int, typer.Option(help="seeds of each SCU run")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot: Annotated[
        Path | None, typer.Option(help="write dmc-figures-3-5.png and dmc-scu.png here")
    ] = None,
) -> None:
    """DMC (cpush, cllookup, cmsg) as a WHAT-IF: hardware that does not exist.

    Reproduces the DMC paper's Figures 3-5 on the simulator's caches, its §6 platform
    (dmc-ppc: two in-order cores, 16-byte lines, 31-cycle L2), with DMC's costs built from
    the paper's latencies (docs/simulator.md, "DMC"); then asks what SCU would gain on the
    given machine models if a migration cost what a cpush-assisted one costs and if the
    guest shim found chunks with cllookup.
    """
    try:
        if seeds < 1 or scu_seeds < 1:
            raise UnicacheError("--seeds and --scu-seeds must be at least 1")
        points = _points(scu)
        seed_list = tuple(range(1, seeds + 1))
        with progress_steps(steps(points, scu_seeds), "DMC") as step:
            scans, trips, lists = run_micro(seed_list, step)
            scu_points = run_scu(points, tuple(range(1, scu_seeds + 1)), step)
        report = DmcReport(scans, trips, lists, scu_points, seed_list)
        written = [] if plot is None else _plot(report, plot)
    except UnicacheError as err:
        user_error(err)
        return
    if as_json:
        plots = [str(p) for p in written]
        emit_json({"costs": asdict(PAPER_COSTS), **asdict(report), "plots": plots})
        return
    _print(report)
    note_plots(written)


def _plot(report: DmcReport, directory: Path) -> list[Path]:
    from unicache_sim.repro.dmc_plot import plot_dmc

    return plot_dmc(report, directory)


def _print(report: DmcReport) -> None:
    console = Console()
    table = Table(title="DMC microbenchmarks on dmc-ppc (the paper's §6 platform), cycles")
    for col in ("figure", "x", "without DMC", "with DMC", "faster", "paper"):
        table.add_column(col, justify="right")
    for p in report.scan:
        paper = PAPER_SCAN_FASTER.get(p.lines)
        table.add_row(
            "3 scan (lw / cmsg)",
            f"{p.lines} line(s)",
            f"{p.lw:.0f}",
            f"{p.cmsg:.0f}",
            f"{p.faster:+.0%}",
            "" if paper is None else f"{paper:+.0%}",
        )
    base = report.pingpong[0][1]
    for k, trip in report.pingpong:
        paper_trip = PAPER_TRIP.get(k)
        table.add_row(
            "4 ping-pong (cpush)",
            f"{k} pushed",
            f"{base:.0f}",
            f"{trip:.0f}",
            f"{1 - trip / base:+.0%}",
            "" if paper_trip is None else f"{paper_trip:.0f} cycles",
        )
    n = len(report.seeds)
    for lp in report.lists:
        paper = PAPER_LIST_FASTER.get(lp.extra)
        table.add_row(
            f"5 list (lw / cmsg), {n} seeds",
            f"{lp.extra} extra",
            f"{lp.lw.median:.0f} ({lp.lw.low:.0f}-{lp.lw.high:.0f})",
            f"{lp.cmsg.median:.0f} ({lp.cmsg.low:.0f}-{lp.cmsg.high:.0f})",
            f"{lp.faster.median:+.0%} ({lp.faster.low:+.0%}..{lp.faster.high:+.0%})",
            "" if paper is None else f"{paper:+.0%}",
        )
    console.print(table)
    if not report.scu:
        return
    scu = Table(title="SCU on DMC hardware: WHAT-IF, no such hardware exists (live path)")
    for col in (
        "model",
        "WS MiB",
        "migration",
        "cllookup",
        "cycles same/other group",
        "speedup (range)",
        "of oracle",
        "migrations/read",
    ):
        scu.add_column(col, justify="right")
    for sp in report.scu:
        scu.add_row(
            sp.model,
            f"{sp.ws_mb:g}",
            "today's" if sp.migration == "none" else f"cpush {sp.migration}",
            "yes" if sp.lookup else "no",
            f"{sp.migration_cycles:,.0f} / {sp.migration_cycles_remote:,.0f}",
            f"{sp.speedup.median:.2f} ({sp.speedup.low:.2f}-{sp.speedup.high:.2f})",
            f"{sp.of_oracle.median:.2f}",
            f"{sp.migrations.median:.2f}",
        )
    console.print(scu)
