"""The ``unicache-sim mfc`` command: the MFC read experiment at a list of working sets, as
a table, JSON or a Figure 3-style plot (mounted by cli/main.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from unicache.errors import UnicacheError
from unicache.topology import Unify
from unicache.topology.toml import load_model

from unicache_sim.cli.common import user_error
from unicache_sim.cli.output import emit_json, note_plots, progress_steps
from unicache_sim.experiments.dmc.whatif import MIGRATION_MODES
from unicache_sim.experiments.mfc.read import PointResult, baselines_for, run_mfc
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

#: the options of ``unicache-sim mfc`` (their defaults are the command's)
ModelOption = Annotated[str, typer.Option(help="machine model (unicache.topology)")]
WorkloadOption = Annotated[str, typer.Option(help="read, grep, wc or md5sum")]
DistOption = Annotated[str, typer.Option(help="file popularity: uniform or zipf")]
WsMbOption = Annotated[str, typer.Option(help="working sets in MiB")]
ThreadsOption = Annotated[int, typer.Option(help="reader threads")]
DramBwScaleOption = Annotated[float, typer.Option(help="DRAM bandwidth factor")]
PathOption = Annotated[
    str,
    typer.Option(
        help="live: the product's loop (daemon round, agent report, shim rule); "
        "whatif: the in-kernel MFC what-if (synchronous mfc_access per read)"
    ),
]
SetupOption = Annotated[
    str,
    typer.Option(
        help="equal: the same threads in every baseline; parallel: MFC §6.3, "
        "--threads under Linux and twice as many under unicache"
    ),
]
UnifyOption = Annotated[
    str,
    typer.Option(
        help="the daemon's --unify: llc (a unit is an LLC group) or l2 (a unit is one "
        "core and its private caches)"
    ),
]
RoundMsOption = Annotated[
    float | None, typer.Option(help="daemon round period, ms (default: the daemon's)")
]
WindowPassesOption = Annotated[
    float,
    typer.Option(
        help="a sampled interval lasts this many passes over the working set "
        "(docs/simulator.md, 'The live loop'); inf: simulate every interval whole"
    ),
]
CorunnerOption = Annotated[str, typer.Option(help="none, mergesort, cachebuster, spinloop")]
BackgroundKibOption = Annotated[
    int, typer.Option(help="other users' footprint per CPU, KiB (MFC §4.6); 0: none")
]
BackgroundPeriodOption = Annotated[
    float, typer.Option(help="how often each CPU's other users read it, us")
]
FileKibOption = Annotated[
    int,
    typer.Option(help="size of every file, KiB (MFC §6.1: 256); large files make a scan"),
]
ReadKibOption = Annotated[
    int,
    typer.Option(
        help="KiB per read call of the guest's program on the live path (coreutils: "
        "128); 0: one call per chunk of the policy's size, as MFC §6.1 reads each file "
        "whole"
    ),
]
DmcMigrationOption = Annotated[
    str,
    typer.Option(
        help="WHAT-IF, hardware that does not exist: none (default, the model's own "
        "cost); push (DMC cpush pushes the working set, the OS hop stays); handoff "
        "(DMC §6.2's run-queue hand-off with the context pushed)"
    ),
]
DmcLookupOption = Annotated[
    bool,
    typer.Option(
        help="WHAT-IF: the shim finds chunks with DMC's cllookup (hardware that does "
        "not exist)"
    ),
]
SeedOption = Annotated[int, typer.Option(help="random seed")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]
PlotOption = Annotated[Path | None, typer.Option(help="write a Figure 3-style PNG")]


@dataclass(frozen=True, slots=True)
class MfcOptions:
    """The options that make the experiment (every one but the working sets and the
    output), as given on the command line."""

    workload: str
    dist: str
    threads: int
    dram_bw_scale: float
    path: str
    setup: str
    unify: str
    round_ms: float | None
    window_passes: float
    corunner: str
    background_kib: int
    background_period_us: float
    file_kib: int
    read_kib: int
    dmc_migration: str
    dmc_lookup: bool
    seed: int

    def check(self) -> None:
        """Refuse a value the experiment cannot take, naming its option.

        :raises UnicacheError: on the first bad option, in the order of ``--help``.
        """
        for option, value, known in (
            ("--workload", self.workload, WORKLOADS),
            ("--dist", self.dist, DISTRIBUTIONS),
            ("--corunner", self.corunner, CORUNNERS),
        ):
            if value not in known:
                raise UnicacheError(f"{option} must be one of {', '.join(known)}")
        if self.threads < 1:
            raise UnicacheError("--threads must be at least 1")
        for option, value, known in (
            ("--dmc-migration", self.dmc_migration, MIGRATION_MODES),
            ("--path", self.path, PATHS),
            ("--setup", self.setup, SETUPS),
            ("--unify", self.unify, tuple(u.value for u in Unify)),
        ):
            if value not in known:
                raise UnicacheError(f"{option} must be one of {', '.join(known)}")
        self._check_ranges()

    def _check_ranges(self) -> None:
        round_ms = self.round_ms
        if self.window_passes <= 0 or (round_ms is not None and not 50 <= round_ms <= 3_600_000):
            raise UnicacheError(
                "--window-passes must be > 0 and --round-ms within 50..3600000 "
                "(the daemon's interval_s bounds)"
            )
        if self.background_kib < 0 or self.background_period_us <= 0:
            raise UnicacheError("--background-kib must be >= 0 and --background-period-us > 0")
        if not 4 <= self.file_kib <= 1 << 20:
            raise UnicacheError("--file-kib must be within 4..1048576")
        if not 0 <= self.read_kib <= 1 << 20:
            raise UnicacheError("--read-kib must be within 0..1048576")

    def spec(self) -> MfcSpec:
        """The experiment these options ask for (after :meth:`check`)."""
        return MfcSpec(
            workload=self.workload,
            dist=self.dist,
            threads=self.threads,
            dram_bw_scale=self.dram_bw_scale,
            path=self.path,
            setup=self.setup,
            unify=self.unify,
            timing=_timing(self.round_ms, self.window_passes),
            corunner=self.corunner,
            background_bytes=self.background_kib * 1024,
            background_period_s=self.background_period_us * 1e-6,
            file_bytes=self.file_kib * 1024,
            read_bytes=self.read_kib * 1024,
            dmc_migration=MIGRATION_MODES[MIGRATION_MODES.index(self.dmc_migration)],
            dmc_lookup=self.dmc_lookup,
            seed=self.seed,
        )


def mfc(
    model: ModelOption = "opteron-16",
    workload: WorkloadOption = "read",
    dist: DistOption = "uniform",
    ws_mb: WsMbOption = "1,2,4,8,16,32,64,128",
    threads: ThreadsOption = 1,
    dram_bw_scale: DramBwScaleOption = 1.0,
    path: PathOption = "live",
    setup: SetupOption = "equal",
    unify: UnifyOption = "llc",
    round_ms: RoundMsOption = None,
    window_passes: WindowPassesOption = 4.0,
    corunner: CorunnerOption = "none",
    background_kib: BackgroundKibOption = 0,
    background_period_us: BackgroundPeriodOption = 4000.0,
    file_kib: FileKibOption = 256,
    read_kib: ReadKibOption = 0,
    dmc_migration: DmcMigrationOption = "none",
    dmc_lookup: DmcLookupOption = False,
    seed: SeedOption = 1,
    as_json: JsonOption = False,
    plot: PlotOption = None,
) -> None:
    """The MFC read experiment (paper §6.2): linux, unicache and oracle per working set."""
    options = MfcOptions(
        workload=workload,
        dist=dist,
        threads=threads,
        dram_bw_scale=dram_bw_scale,
        path=path,
        setup=setup,
        unify=unify,
        round_ms=round_ms,
        window_passes=window_passes,
        corunner=corunner,
        background_kib=background_kib,
        background_period_us=background_period_us,
        file_kib=file_kib,
        read_kib=read_kib,
        dmc_migration=dmc_migration,
        dmc_lookup=dmc_lookup,
        seed=seed,
    )
    try:
        options.check()
        sizes = _parse_sizes(ws_mb)
        topo = load_model(model)
        spec = options.spec()
        names = baselines_for(spec)
        with progress_steps(len(sizes) * len(names)) as step:
            points = run_mfc(topo, spec, sizes, step)
        if plot is not None:
            from unicache_sim.repro.throughput_plot import plot_mfc

            plot_mfc(points, plot, f"{model} {workload} {dist}, {threads} thread(s)")
    except UnicacheError as err:
        user_error(err)
        return
    if as_json:
        emit_json({"model": model, "spec": asdict(spec), "points": _points_json(points)})
        return
    Console().print(_table(model, options, names, points))
    note_plots([plot])


def _table(
    model: str, options: MfcOptions, names: tuple[str, ...], points: list[PointResult]
) -> Table:
    """Throughput, speedups and DRAM traffic per working set, a column per baseline."""
    whatif = ""
    if options.dmc_migration != "none" or options.dmc_lookup:
        whatif = (
            f" — WHAT-IF DMC (migration {options.dmc_migration}, cllookup "
            f"{options.dmc_lookup}), no such hardware"
        )
    title = f"MFC {options.workload} ({options.dist}) on {model}, {options.threads} thread(s)"
    table = Table(title=title + whatif)
    table.add_column("WS MiB", justify="right")
    for b in names:
        table.add_column(f"{b} MB/s", justify="right")
    table.add_column("speedup", justify="right")
    same_readers = LINUX_SAME_READERS in names
    if same_readers:
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
            *([f"{p.same_readers_speedup:.2f}"] if same_readers else []),
            f"{p.of_oracle:.2f}",
            *(f"{p.get(b).dram_per_byte:.3f}" for b in names),
        )
    return table


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
