"""The ``unicache-sim`` command: the MFC, OBS, SRM and NCC experiments, the MFC grid, the speed
benchmark, calibration, and the DMC what-if."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from unicache.errors import UnicacheError
from unicache.topology import Unify
from unicache.topology.toml import load_model

from unicache_sim.cli.bound import bound
from unicache_sim.cli.colors_replicas import ncc, srm
from unicache_sim.cli.common import stderr, user_error
from unicache_sim.cli.dmc import dmc as dmc_command
from unicache_sim.cli.figures import figures
from unicache_sim.cli.grid import grid
from unicache_sim.cli.obs import obs
from unicache_sim.experiments.dmc.whatif import MIGRATION_MODES
from unicache_sim.experiments.mfc.read import PointResult, baselines_for, run_mfc
from unicache_sim.experiments.mfc.sched_hop import DEFAULT_HOPS
from unicache_sim.experiments.mfc.spec import (
    CORUNNERS,
    DISTRIBUTIONS,
    LINUX_SAME_READERS,
    PATHS,
    SETUPS,
    WORKLOADS,
    MfcSpec,
)
from unicache_sim.guest.livetiming import LoopTiming

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


def _parse_sizes(text: str) -> list[float]:
    try:
        sizes = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise UnicacheError(f"--ws-mb wants a comma-separated list of sizes, not {text!r}") from err
    if not sizes or any(s <= 0 for s in sizes):
        raise UnicacheError("--ws-mb needs positive sizes")
    return sizes


def _points_json(points: list[PointResult]) -> list[dict[str, object]]:
    out = []
    for p in points:
        out.append(
            {
                "ws_mb": p.ws_mb,
                "speedup": p.speedup,
                "same_readers_speedup": p.same_readers_speedup,
                "of_oracle": p.of_oracle,
                "baselines": {r.baseline: asdict(r) for r in p.results},
            }
        )
    return out


def _timing(round_ms: float | None, window_passes: float) -> LoopTiming:
    if round_ms is None:
        return LoopTiming.daemon_defaults(window_passes=window_passes)
    period = round_ms / 1e3
    return LoopTiming.daemon_defaults(
        window_passes=window_passes, round_s=period, report_s=max(period, 0.1)
    )


@app.command()
def mfc(
    model: Annotated[str, typer.Option(help="machine model (unicache.topology)")] = "opteron-16",
    workload: Annotated[str, typer.Option(help="read, grep, wc or md5sum")] = "read",
    dist: Annotated[str, typer.Option(help="file popularity: uniform or zipf")] = "uniform",
    ws_mb: Annotated[str, typer.Option(help="working sets in MiB")] = "1,2,4,8,16,32,64,128",
    threads: Annotated[int, typer.Option(help="reader threads")] = 1,
    dram_bw_scale: Annotated[float, typer.Option(help="DRAM bandwidth factor")] = 1.0,
    path: Annotated[
        str,
        typer.Option(
            help="live: the product's loop (daemon round, agent report, shim rule); "
            "whatif: the in-kernel MFC what-if (synchronous mfc_access per read)"
        ),
    ] = "live",
    setup: Annotated[
        str,
        typer.Option(
            help="equal: the same threads in every baseline; parallel: MFC §6.3, "
            "--threads under Linux and twice as many under unicache"
        ),
    ] = "equal",
    unify: Annotated[
        str,
        typer.Option(
            help="the daemon's --unify: llc (a unit is an LLC group) or l2 (a unit is one "
            "core and its private caches)"
        ),
    ] = "llc",
    round_ms: Annotated[
        float | None, typer.Option(help="daemon round period, ms (default: the daemon's)")
    ] = None,
    window_passes: Annotated[
        float,
        typer.Option(
            help="a sampled interval lasts this many passes over the working set "
            "(docs/simulator.md, 'The live loop'); inf: simulate every interval whole"
        ),
    ] = 4.0,
    corunner: Annotated[str, typer.Option(help="none, mergesort, cachebuster, spinloop")] = "none",
    background_kib: Annotated[
        int, typer.Option(help="other users' footprint per CPU, KiB (MFC §4.6); 0: none")
    ] = 0,
    background_period_us: Annotated[
        float, typer.Option(help="how often each CPU's other users read it, us")
    ] = 4000.0,
    file_kib: Annotated[
        int,
        typer.Option(help="size of every file, KiB (MFC §6.1: 256); large files make a scan"),
    ] = 256,
    read_kib: Annotated[
        int,
        typer.Option(
            help="KiB per read call of the guest's program on the live path (coreutils: "
            "128); 0: one call per chunk of the policy's size, as MFC §6.1 reads each file "
            "whole"
        ),
    ] = 0,
    dmc_migration: Annotated[
        str,
        typer.Option(
            help="WHAT-IF, hardware that does not exist: none (default, the model's own "
            "cost); push (DMC cpush pushes the working set, the OS hop stays); handoff "
            "(DMC §6.2's run-queue hand-off with the context pushed)"
        ),
    ] = "none",
    dmc_lookup: Annotated[
        bool,
        typer.Option(
            help="WHAT-IF: the shim finds chunks with DMC's cllookup (hardware that does "
            "not exist)"
        ),
    ] = False,
    seed: Annotated[int, typer.Option(help="random seed")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot: Annotated[Path | None, typer.Option(help="write a Figure 3-style PNG")] = None,
) -> None:
    """The MFC read experiment (paper §6.2): linux, unicache and oracle per working set."""
    try:
        if workload not in WORKLOADS:
            raise UnicacheError(f"--workload must be one of {', '.join(WORKLOADS)}")
        if dist not in DISTRIBUTIONS:
            raise UnicacheError(f"--dist must be one of {', '.join(DISTRIBUTIONS)}")
        if corunner not in CORUNNERS:
            raise UnicacheError(f"--corunner must be one of {', '.join(CORUNNERS)}")
        if threads < 1:
            raise UnicacheError("--threads must be at least 1")
        if dmc_migration not in MIGRATION_MODES:
            raise UnicacheError(f"--dmc-migration must be one of {', '.join(MIGRATION_MODES)}")
        if path not in PATHS:
            raise UnicacheError(f"--path must be one of {', '.join(PATHS)}")
        if setup not in SETUPS:
            raise UnicacheError(f"--setup must be one of {', '.join(SETUPS)}")
        if unify not in {u.value for u in Unify}:
            raise UnicacheError(f"--unify must be one of {', '.join(u.value for u in Unify)}")
        if window_passes <= 0 or (round_ms is not None and not 50 <= round_ms <= 3_600_000):
            raise UnicacheError(
                "--window-passes must be > 0 and --round-ms within 50..3600000 "
                "(the daemon's interval_s bounds)"
            )
        if background_kib < 0 or background_period_us <= 0:
            raise UnicacheError("--background-kib must be >= 0 and --background-period-us > 0")
        if not 4 <= file_kib <= 1 << 20:
            raise UnicacheError("--file-kib must be within 4..1048576")
        if not 0 <= read_kib <= 1 << 20:
            raise UnicacheError("--read-kib must be within 0..1048576")
        sizes = _parse_sizes(ws_mb)
        topo = load_model(model)
        spec = MfcSpec(
            workload=workload,
            dist=dist,
            threads=threads,
            dram_bw_scale=dram_bw_scale,
            path=path,
            setup=setup,
            unify=unify,
            timing=_timing(round_ms, window_passes),
            corunner=corunner,
            background_bytes=background_kib * 1024,
            background_period_s=background_period_us * 1e-6,
            file_bytes=file_kib * 1024,
            read_bytes=read_kib * 1024,
            dmc_migration=MIGRATION_MODES[MIGRATION_MODES.index(dmc_migration)],
            dmc_lookup=dmc_lookup,
            seed=seed,
        )
        with Progress(console=stderr, transient=True) as progress:
            names = baselines_for(spec)
            task = progress.add_task("simulating", total=len(sizes) * len(names))

            def step(label: str) -> None:
                progress.update(task, advance=1, description=label)

            points = run_mfc(topo, spec, sizes, step)
        if plot is not None:
            from unicache_sim.repro.throughput_plot import plot_mfc

            plot_mfc(points, plot, f"{model} {workload} {dist}, {threads} thread(s)")
    except UnicacheError as err:
        user_error(err)
        return
    if as_json:
        doc = {"model": model, "spec": asdict(spec), "points": _points_json(points)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    whatif = ""
    if dmc_migration != "none" or dmc_lookup:
        whatif = (
            f" — WHAT-IF DMC (migration {dmc_migration}, cllookup {dmc_lookup}), no such hardware"
        )
    table = Table(title=f"MFC {workload} ({dist}) on {model}, {threads} thread(s){whatif}")
    table.add_column("WS MiB", justify="right")
    for b in names:
        table.add_column(f"{b} MB/s", justify="right")
    table.add_column("speedup", justify="right")
    if LINUX_SAME_READERS in names:
        # the parallel set-up: what unicache changes over Linux with as many readers
        table.add_column("x same readers", justify="right")
    table.add_column("of oracle", justify="right")
    for b in names:
        table.add_column(f"DRAM/B {b}", justify="right")
    for p in points:
        table.add_row(
            f"{p.ws_mb:g}",
            *(f"{p.get(b).mb_per_s:,.0f}" for b in names),
            f"{p.speedup:.2f}",
            *([f"{p.same_readers_speedup:.2f}"] if LINUX_SAME_READERS in names else []),
            f"{p.of_oracle:.2f}",
            *(f"{p.get(b).dram_per_byte:.3f}" for b in names),
        )
    Console().print(table)
    if plot is not None:
        Console().print(f"plot written to {plot}")


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
        doc = {**asdict(result), "ratio": result.ratio, "scaling": result.scaling}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
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
        doc = {
            "tools": [asdict(r) for r in results],
            "hops": [{**asdict(h), "move_cycles": h.move_cycles} for h in hop_results],
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
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
