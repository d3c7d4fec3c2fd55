"""``unicache-sim bound``: what unification can reach with many readers, against Linux."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from unicache.errors import UnicacheError
from unicache.topology import Unify
from unicache.topology.toml import load_model

from unicache_sim.cli.common import stderr, user_error
from unicache_sim.cli.output import emit_json
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.mfc.parallel_bound import ParallelBound, parallel_bound
from unicache_sim.experiments.mfc.read import readers, run_baseline
from unicache_sim.experiments.mfc.spec import MIB, SETUPS, MfcSpec


def bound(
    model: Annotated[str, typer.Option(help="machine model")] = "opteron-16",
    threads: Annotated[int, typer.Option(help="reader threads (as unicache-sim mfc)")] = 16,
    setup: Annotated[
        str,
        typer.Option(
            help="equal: as many readers as Linux; parallel: MFC §6.3, twice as many"
        ),
    ] = "parallel",
    unify: Annotated[str, typer.Option(help="llc, l2, or both (comma-separated)")] = "llc,l2",
    ws_mb: Annotated[float, typer.Option(help="working set of the Linux run, MiB")] = 8.0,
    seed: Annotated[int, typer.Option(help="seed of the Linux run and the queue")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Upper bounds on unicache's throughput with many readers (docs/simulator.md, "The
    parallel set-up"): every CPU busy with reads at its unit's cache speed and the moves
    they need, then the same with readers queueing for their unit's CPUs; each against
    the simulated Linux of `unicache-sim mfc` at the same point."""
    try:
        if setup not in SETUPS:
            raise UnicacheError(f"--setup must be one of {', '.join(SETUPS)}")
        if threads < 1 or ws_mb <= 0:
            raise UnicacheError("--threads must be at least 1 and --ws-mb above 0")
        levels = [u.strip() for u in unify.split(",") if u.strip()]
        known = {u.value for u in Unify}
        if not levels or not set(levels) <= known:
            raise UnicacheError(f"--unify takes {', '.join(sorted(known))}, comma-separated")
        topo = load_model(model)
        spec = MfcSpec(threads=threads, setup=setup, seed=seed)
        with stderr.status(f"simulating linux, {readers(spec, 'linux')} readers"):
            linux = run_baseline("linux", topo, from_topology(topo), spec, int(ws_mb * MIB))
        many = readers(spec, "unicache")
        bounds = [parallel_bound(topo, Unify(u), many, seed=seed) for u in levels]
    except UnicacheError as err:
        user_error(err)
        return
    linux_gb_s = linux.mb_per_s / 1e3
    if as_json:
        emit_json(
            {
                "model": model,
                "linux": {"readers": readers(spec, "linux"), "gb_per_s": linux_gb_s},
                "bounds": [_row(b, linux_gb_s) for b in bounds],
            }
        )
        return
    table = Table(
        title=f"{model}: at most, {many} readers under unicache; Linux with "
        f"{readers(spec, 'linux')} reads {linux_gb_s:.1f} GB/s at {ws_mb:g} MiB"
    )
    for col in ("unify", "units x CPUs", "read cycles", "moves/read", "CPU bound",
                "queue bound", "x linux"):
        table.add_column(col, justify="right")
    for b in bounds:
        table.add_row(
            b.unify,
            f"{b.units} x {b.cpus_per_unit}",
            f"{b.read_cycles:,.0f}",
            f"{b.move_cycles:,.0f}",
            f"{b.cpu_bound_gb_s:.1f} GB/s",
            f"{b.queue_bound_gb_s:.1f} GB/s",
            f"{b.queue_bound_gb_s / linux_gb_s:.2f}",
        )
    Console().print(table)


def _row(b: ParallelBound, linux_gb_s: float) -> dict[str, object]:
    return {
        **asdict(b),
        "cpu_bound_x_linux": b.cpu_bound_gb_s / linux_gb_s,
        "queue_bound_x_linux": b.queue_bound_gb_s / linux_gb_s,
    }
