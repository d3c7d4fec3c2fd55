"""The ``unicache-sim`` command: the MFC, OBS, SRM and NCC experiments, the MFC grid, the speed
benchmark, calibration, and the DMC what-if."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from unicache.errors import UnicacheError

from unicache_sim.cli.bound import bound
from unicache_sim.cli.colors_replicas import ncc, srm
from unicache_sim.cli.common import user_error
from unicache_sim.cli.dmc import dmc as dmc_command
from unicache_sim.cli.figures import figures
from unicache_sim.cli.grid import grid
from unicache_sim.cli.mfc import mfc
from unicache_sim.cli.obs import obs
from unicache_sim.cli.output import emit_json
from unicache_sim.experiments.mfc.sched_hop import DEFAULT_HOPS

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
# mfc first: the commands are listed in the order they are added
app.command("mfc")(mfc)


@app.command()
def bench(
    model: Annotated[str, typer.Option(help="machine model")] = "opteron-16",
    accesses: Annotated[int, typer.Option(help="line accesses")] = 8_000_000,
    ws_mb: Annotated[int, typer.Option(help="working set of the trace, MiB")] = 8,
    repeats: Annotated[int, typer.Option(help="runs of each measurement (median)")] = 3,
    threads: Annotated[
        str | None,
        typer.Option(
            help="thread pools of the parallel measurement, comma-separated "
            "(default: 1 and this machine's CPUs; 0: none)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Speed of the native core, and of pycachesim on the same single-core trace; then
    independent simulations on 1, 2, ... threads of this process (the scaling)."""
    from unicache_sim.experiments.sim_speed import run_bench

    try:
        if repeats < 1:
            raise UnicacheError("--repeats must be at least 1")
        pools = None if threads is None else _thread_pools(threads)
        result = run_bench(model, accesses, ws_mb, repeats, pools)
    except UnicacheError as err:
        user_error(err)
        return
    if as_json:
        emit_json({**asdict(result), "ratio": result.ratio, "scaling": result.scaling})
        return
    title = f"simulator speed, {result.accesses:,} line accesses ({model})"
    table = Table(title=f"{title}, median of {result.repeats} runs, thread CPU time")
    table.add_column("run")
    table.add_column("M accesses/s", justify="right")
    table.add_row(
        f"unicache-sim, {model} (all cores)",
        f"{result.multicore_rate / 1e6:.1f} "
        f"({result.multicore_min / 1e6:.1f}-{result.multicore_max / 1e6:.1f})",
    )
    table.add_row("unicache-sim, one core's L1/L2/L3", f"{result.single_core_rate / 1e6:.1f}")
    if result.pycachesim_rate is not None:
        table.add_row("pycachesim, same hierarchy", f"{result.pycachesim_rate / 1e6:.1f}")
        table.add_row("ratio (same trace)", f"{result.ratio:.1f}x")
        table.add_row("hit counts equal", str(result.counts_equal))
    for run in result.parallel:
        table.add_row(
            f"{run.jobs} simulations of {model} on {run.threads} thread(s), wall time "
            f"({run.cores_busy:.2f} cores busy)",
            f"{run.rate / 1e6:.1f}",
        )
    if result.scaling is not None:
        table.add_row("scaling (most threads / one)", f"{result.scaling:.2f}x")
        table.add_row("counts equal on every pool", str(result.parallel_counts_equal))
    Console().print(table)


def _thread_pools(text: str) -> tuple[int, ...]:
    """``--threads``: positive thread counts, or 0 for none."""
    try:
        pools = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise UnicacheError(f"--threads wants integers, not {text!r}") from err
    if pools == (0,):
        return ()
    if not pools or any(n < 1 for n in pools):
        raise UnicacheError(f"--threads wants thread counts of at least 1 (or 0), not {text!r}")
    return pools


@app.command()
def calibrate(
    size_mib: Annotated[int, typer.Option(help="size of the test file")] = 64,
    tools: Annotated[
        bool, typer.Option("--tools/--no-tools", help="time grep, wc and md5sum")
    ] = True,
    hops: Annotated[
        int, typer.Option(help="sched_setaffinity hops to time (0: none)")
    ] = DEFAULT_HOPS,
    guest: Annotated[
        str | None, typer.Option(help="also time the hop between two vCPUs of this VM")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Time grep, wc and md5sum over a cached file (compute cycles per byte) and a thread's
    sched_setaffinity hop between two CPUs, here and optionally in a guest."""
    from unicache_sim.engine.calibration import calibrate as measure
    from unicache_sim.experiments.mfc.sched_hop import Hop, measure_guest_hop, measure_host_hop

    try:
        results = measure(size_mib) if tools else ()
        hop_results: list[Hop] = []
        if hops:
            hop_results.append(measure_host_hop(hops))
            if guest is not None:
                hop_results.append(measure_guest_hop(guest, hops))
    except UnicacheError as err:
        user_error(err)
        return
    if as_json:
        emit_json(
            {
                "tools": [asdict(r) for r in results],
                "hops": [{**asdict(h), "move_cycles": h.move_cycles} for h in hop_results],
            }
        )
        return
    if results:
        table = Table(title="compute cycles per byte (this machine)")
        for col in ("tool", "seconds", "cat seconds", "GHz", "cycles/byte"):
            table.add_column(col)
        for r in results:
            table.add_row(
                r.tool,
                f"{r.seconds:.4f}",
                f"{r.cat_seconds:.4f}",
                f"{r.clock_ghz:.2f}",
                f"{r.cycles_per_byte:.2f}",
            )
        Console().print(table)
    for h in hop_results:
        Console(width=200).print(h.line(), highlight=False)


app.command("srm")(srm)
app.command("ncc")(ncc)
app.command("grid")(grid)
app.command("bound")(bound)
app.command("figures")(figures)
app.command("dmc")(dmc_command)
app.command("obs")(obs)


def main() -> None:
    """Entry point of the console script."""
    app()
