"""``unicache-sim srm`` and ``unicache-sim ncc``: the coloring (SRM-buffer) and replica
(NCC) experiments, mounted by :mod:`unicache_sim.cli.main`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from unicache.errors import UnicacheError
from unicache.topology.toml import load_model

from unicache_sim.cli.common import user_error
from unicache_sim.cli.output import emit_json, note_plots, progress_steps

if TYPE_CHECKING:
    from unicache_sim.experiments.ncc.replicas import NccResult, NccRun
    from unicache_sim.experiments.srm.colors import SrmPoint


def _parse_kib(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as err:
        raise UnicacheError(f"--sizes-kb wants comma-separated whole KiB, not {text!r}") from err
    if not sizes or any(s < 4 for s in sizes):
        raise UnicacheError("--sizes-kb needs sizes of at least 4 KiB")
    return sizes


#: the options of ``unicache-sim srm``
SrmCaseOption = Annotated[
    str,
    typer.Option(
        help="fig2 (§2, Figure 2: mergesort array sizes next to grep); sweep-tl "
        "(Figure 16: T_l 16-512); random (§4.5: random 4 KiB reads, coloring must not "
        "hurt); rescan (§4.5: a small file scanned again and again); corunners "
        "(Figure 13: 1-3 greps on a core-i7-860)"
    ),
]
SrmModelOption = Annotated[
    str | None,
    typer.Option(help="machine model (default: the paper's for the case, xeon-x5355 or "
                 "core-i7-860)"),
]
SrmSeedsOption = Annotated[
    str, typer.Option(help="the §4 cases: seeds N (1..N), A-B or a list; fig2: --seed")
]
SizesKbOption = Annotated[
    str, typer.Option(help="mergesort array sizes, KiB (§2: 256 KiB to 1.5 MiB)")
]
TarballMbOption = Annotated[int, typer.Option(help="size of grep's file, MiB")]
VmPagesOption = Annotated[
    str,
    typer.Option(
        help="with coloring, mergesort's pages: srm (Figure 7 vm_color round-robin) "
        "or spread (normal allocator, as §2)"
    ),
]
TlOption = Annotated[int, typer.Option("--t-l", help="§3.2 T_l: pages per color")]
SrmSeedOption = Annotated[int, typer.Option(help="random seed of the page allocator")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]
SrmPlotOption = Annotated[Path | None, typer.Option(help="write a Figure 2-style PNG")]

#: the options of ``unicache-sim ncc``
NccCaseOption = Annotated[
    str,
    typer.Option(
        help="grep (§5 Figure 3, Table 1: parallel greps over a tree); iozone (§5 "
        "Tables 3-5, Figure 4: iozone threads writing and reading their own files, "
        "migrating between nodes from test to test, memory tight as threads grow)"
    ),
]
NccModelOption = Annotated[str, typer.Option(help="machine model with two or more NUMA nodes")]
TreeMbOption = Annotated[float, typer.Option(help="size of the tree, MB (§5: /etc, 40 MB)")]
FileKbOption = Annotated[float, typer.Option(help="mean file size, KB")]
ShellsOption = Annotated[int, typer.Option(help="parallel shells (§5: 2 to 10)")]
GrepsOption = Annotated[int, typer.Option(help="greps in all shells together (§5: 120)")]
NccSeedOption = Annotated[int, typer.Option(help="grep: random seed of file sizes and pages")]
IozoneThreadsOption = Annotated[
    str, typer.Option(help="iozone: thread counts, comma-separated (§5: 2 to 10)")
]
IozoneSeedsOption = Annotated[str, typer.Option(help="iozone: seeds N (1..N), A-B or a list")]
RoundSOption = Annotated[
    float, typer.Option(help="iozone: the daemon's round, s (its default 1 s; the paper's "
                        "kernel makes a replica within the read)")
]
SystemMbOption = Annotated[
    float, typer.Option(help="iozone: a node's memory held by the system, MiB at the "
                        "paper's 1 GiB node (the paper gives none)")
]
ScaleOption = Annotated[
    int, typer.Option(help="iozone: sizes and the round divided by this (8: 16 MiB files)")
]
AlwaysPlaceOption = Annotated[
    bool,
    typer.Option(
        "--always-place",
        help="NCC replicates without its gain prediction and step-aside, as the "
        "daemon's --always-place (the paper's NCC; never slower no longer holds)",
    ),
]
NccPlotOption = Annotated[Path | None, typer.Option(help="grep: write a bar-chart PNG")]


def srm(
    case: SrmCaseOption = "fig2",
    model: SrmModelOption = None,
    seeds: SrmSeedsOption = "5",
    sizes_kb: SizesKbOption = "256,512,768,1024,1280,1536",
    tarball_mb: TarballMbOption = 64,
    vm_pages: VmPagesOption = "srm",
    t_l: TlOption = 256,
    seed: SrmSeedOption = 1,
    as_json: JsonOption = False,
    plot: SrmPlotOption = None,
) -> None:
    """SRM paper: mergesort next to file readers on a shared LLC, with and without page
    coloring by the product's SRM policy. fig2 (§2): slowdown and LLC misses per million
    instructions against the array size; the §4 cases: medians over seeds with the range."""
    from unicache_sim.experiments.srm.colors import PLACEMENTS, run_srm
    from unicache_sim.experiments.srm.memory import SrmSpec

    if case != "fig2":
        from unicache_sim.cli.srm_cases import srm_case

        srm_case(case, model, seeds, as_json, plot)
        return
    model = model or "xeon-x5355"
    try:
        if vm_pages not in ("srm", "spread"):
            raise UnicacheError("--vm-pages must be srm or spread")
        if tarball_mb < 8:
            raise UnicacheError("--tarball-mb must be at least 8 (far more than the LLC)")
        if t_l < 1:
            raise UnicacheError("--t-l must be at least 1")
        spec = SrmSpec(
            sizes_kb=_parse_kib(sizes_kb),
            tarball_mb=tarball_mb,
            vm_pages=vm_pages,
            t_l=t_l,
            seed=seed,
        )
        topo = load_model(model)
        with progress_steps(len(spec.sizes_kb) * 2 * len(PLACEMENTS)) as step:
            points = run_srm(topo, spec, step)
        if plot is not None:
            from unicache_sim.repro.figures import plot_srm

            plot_srm(points, plot, f"{model}: mergesort with grep on a shared LLC")
    except UnicacheError as err:
        user_error(err)
        return
    if as_json:
        from unicache.policy.srm.buffer import page_colors

        doc = {"model": model, "n_colors": page_colors(topo), "spec": asdict(spec)}
        emit_json({**doc, "points": [_srm_pair_json(pair) for pair in points]})
        return
    _print_srm(model, points)
    note_plots([plot])


def _srm_pair_json(pair: tuple[SrmPoint, SrmPoint]) -> dict[str, object]:
    """One array size, without and with coloring, as JSON."""
    doc: dict[str, object] = {"size_kb": pair[0].size_kb}
    for name, p in zip(("without", "with"), pair, strict=True):
        doc[name] = {
            "aside": p.aside,
            "slowdown_pct": p.slowdown_pct,
            "vs_alone": p.vs_alone,
            "misses_per_m_instr": p.get("shared").misses_per_m_instr,
            "runs": {
                r.placement: {**asdict(r), "misses_per_m_instr": r.misses_per_m_instr}
                for r in p.runs
            },
        }
    return doc


def _print_srm(model: str, points: list[tuple[SrmPoint, SrmPoint]]) -> None:
    """Figure 2 as a table, coloring off and on per array size, then why SRM stepped aside."""
    table = Table(
        title=f"SRM §2 on {model}: mergesort next to grep, coloring off / SRM",
        caption="slow%: (T2 - T1) / T1; LLCM: LLC misses per M instructions with grep on the "
        "same LLC (T2); T1: grep on another LLC; aside: SRM's step-aside predicted no gain "
        "and colored nothing (the SRM columns are the uncolored run)",
    )
    for col in ("KiB", "slow% off", "slow% SRM", "LLCM off", "LLCM SRM", "T1 ms off", "T1 ms SRM"):
        table.add_column(col, justify="right")
    for a, b in points:
        table.add_row(
            str(a.size_kb),
            f"{a.slowdown_pct:.1f}",
            f"{b.slowdown_pct:.1f}" + (" aside" if b.aside else ""),
            f"{a.get('shared').misses_per_m_instr:,.0f}",
            f"{b.get('shared').misses_per_m_instr:,.0f}",
            f"{a.get('apart').seconds * 1e3:.2f}",
            f"{b.get('apart').seconds * 1e3:.2f}",
        )
    Console().print(table)
    for _, b in points:
        if b.aside:
            Console().print(f"{b.size_kb} KiB: {b.aside}")


def ncc(
    case: NccCaseOption = "grep",
    model: NccModelOption = "opteron-242-2node",
    tree_mb: TreeMbOption = 40.0,
    file_kb: FileKbOption = 100.0,
    shells: ShellsOption = 2,
    greps: GrepsOption = 120,
    seed: NccSeedOption = 1,
    threads: IozoneThreadsOption = "2,4,6,8,10",
    seeds: IozoneSeedsOption = "5",
    round_s: RoundSOption = 1.0,
    system_mb: SystemMbOption = 204.8,
    scale: ScaleOption = 8,
    always_place: AlwaysPlaceOption = False,
    as_json: JsonOption = False,
    plot: NccPlotOption = None,
) -> None:
    """NCC paper §5 on a cc-NUMA machine, first-touch page cache with and without the
    product's NCC replicas. grep: parallel greps over a tree (local page-hit ratio and run
    time); iozone: per test, throughput, speedup and local page hits over seeds."""
    from unicache_sim.experiments.ncc.replicas import NccSpec, run_ncc

    if case == "iozone":
        from unicache_sim.cli.ncc_iozone import ncc_iozone

        ncc_iozone(model, threads, seeds, round_s, system_mb, scale, as_json, always_place)
        return
    try:
        if case != "grep":
            raise UnicacheError(f"--case: unknown {case!r}; known: grep, iozone")
        spec = NccSpec(
            tree_mb=tree_mb,
            file_kb=file_kb,
            shells=shells,
            greps=greps,
            seed=seed,
            step_aside=not always_place,
        )
        spec.check()
        topo = load_model(model)
        with progress_steps(2) as step:
            result = run_ncc(topo, spec, step)
        if plot is not None:
            from unicache_sim.repro.figures import plot_ncc

            plot_ncc(result, plot, f"{model}: {greps} greps in {shells} shells, {tree_mb:g} MB")
    except UnicacheError as err:
        user_error(err)
        return
    if as_json:
        doc = {"model": model, "spec": asdict(spec), "speedup": result.speedup}
        emit_json({**doc, **{k: _ncc_run_json(r) for k, r in _ncc_runs(result).items()}})
        return
    _print_ncc(f"NCC §5 on {model}: {greps} greps in {shells} shells over {tree_mb:g} MB", result)
    note_plots([plot])


def _ncc_runs(result: NccResult) -> dict[str, NccRun]:
    """The two runs by their name in the JSON and the table."""
    return {"without": result.without, "with": result.with_replicas}


def _ncc_run_json(run: NccRun) -> dict[str, object]:
    """One run as JSON, with its ratios."""
    return {
        **asdict(run),
        "local_ratio": run.local_ratio,
        "replica_memory_ratio": run.replica_memory_ratio,
        "within_budget": run.within_budget,
    }


def _print_ncc(title: str, result: NccResult) -> None:
    """Both runs as a table, the speedup, and whether the replicas fit the agent's budget."""
    table = Table(title=title)
    for col in (
        "replicas",
        "local page hits %",
        "mean grep ms",
        "first grep ms",
        "total s",
        "replicas made",
        "replica MiB (peak, a node)",
        "% of node",
    ):
        table.add_column(col, justify="right")
    for name, r in _ncc_runs(result).items():
        table.add_row(
            name,
            f"{100 * r.local_ratio:.1f}",
            f"{1e3 * r.avg_grep_s:.2f}",
            f"{1e3 * r.first_grep_s:.2f}",
            f"{r.makespan_s:.3f}",
            str(r.replicas_made),
            f"{r.replica_bytes_peak / 2**20:.1f}",
            f"{100 * r.replica_memory_ratio:.1f}",
        )
    Console().print(table)
    Console().print(f"mean grep speedup with replicas: {result.speedup:.2f}x")
    if not result.with_replicas.within_budget:
        Console().print(
            "replica memory exceeded the guest agent's budget "
            f"({result.with_replicas.replica_budget_bytes / 2**20:.1f} MiB a node): "
            "the agent would have evicted replicas this run keeps"
        )
