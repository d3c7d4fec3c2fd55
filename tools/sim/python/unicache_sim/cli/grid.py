"""The ``unicache-sim grid`` command: options, progress bar, output files (mounted by
cli/main.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import TextColumn
from rich.text import Text
from unicache.errors import ConfigError, UnicacheError

from unicache_sim.build import build_fingerprint
from unicache_sim.cli.common import stderr, user_error
from unicache_sim.cli.output import counted_columns, emit_json, progress_steps
from unicache_sim.dask_client import default_workers
from unicache_sim.experiments.mfc.spec import FILE_BYTES
from unicache_sim.grid.plot import plot_model
from unicache_sim.grid.report import (
    CONFIRM_SEEDS,
    THRESHOLD,
    GridRun,
    PointSummary,
    confirmation_points,
    grid_document,
    markdown,
    regressions,
    rich_table,
    summarize_points,
)
from unicache_sim.grid.store import (
    CHECKPOINT_NAME,
    CheckpointWriter,
    load_checkpoint,
)
from unicache_sim.grid.sweep import (
    GridAxes,
    GridPoint,
    GridRequest,
    GridResult,
    build_axes,
    grid_points,
    run_grid,
)


def _csv(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(x.strip() for x in text.split(",") if x.strip())


def _opt(help_text: str, metavar: str) -> Any:
    """An option whose default (``None``: the whole axis) is told in its help."""
    return typer.Option(help=help_text, metavar=metavar, show_default=False)


#: the options of ``unicache-sim grid``; an axis left out (``None``) is the whole axis
ModelsOption = Annotated[
    str | None,
    _opt("machine models, comma-separated [default: every model with several LLCs]", "M,.."),
]
WorkloadsOption = Annotated[str | None, _opt("workloads [default: read,grep,wc,md5sum]", "W,..")]
DistsOption = Annotated[str | None, _opt("file popularity [default: uniform,zipf]", "D,..")]
ThreadsOption = Annotated[
    str | None,
    _opt("reader threads, integers or 'all' (the model's CPUs) [default: 1,4,all]", "T,.."),
]
PathsOption = Annotated[
    str | None,
    _opt("unicache path: live (the product's loop), whatif [default: live,whatif]", "P,.."),
]
SeedsOption = Annotated[int | None, _opt("seeds 1..N of every point [default: 5]", "N")]
WsPointsOption = Annotated[
    int | None,
    _opt("working sets per model, spread over its series, ends kept [default: all]", "N"),
]
SetupOption = Annotated[str, typer.Option(help="MfcSpec.setup: equal or parallel")]
UnifyOption = Annotated[str, typer.Option(help="the daemon's --unify: llc or l2 (MfcSpec.unify)")]
FileKibOption = Annotated[
    int, _opt("size of every file, KiB; large files make a scan [default: 256]", "KIB")
]
OpensOption = Annotated[
    bool,
    typer.Option(
        help="the readers open each file they read, as grep -r and wc do, and the shim "
        "charges its per-file work under the agent's open sample (MfcSpec.opens); "
        "default: they keep their files open"
    ),
]
ReadKibOption = Annotated[
    int,
    _opt(
        "KiB per read call of the guest's program (coreutils: 128) [default: 0, one "
        "call per chunk]",
        "KIB",
    ),
]
QuickOption = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="smoke subset of every axis not given: models with <= 16 CPUs, read, "
        "threads 1,all, 3 working sets (smallest, middle, largest), 2 seeds",
    ),
]
WorkersOption = Annotated[
    int | None, _opt("local worker processes [default: this machine's CPUs]", "N")
]
SchedulerOption = Annotated[
    str | None,
    _opt("use the running Dask scheduler at ADDR (tcp://host:8786) instead", "ADDR"),
]
OutOption = Annotated[Path, typer.Option(help="output directory", metavar="DIR")]
ResumeOption = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="reuse the results in OUT/points.jsonl that this build wrote (a killed or "
        "narrower run) and run only the points missing",
    ),
]
CheckOption = Annotated[
    bool,
    typer.Option(
        "--check",
        help=f"exit 1 if a point's median speedup is below {THRESHOLD} (over seeds "
        f"1-{CONFIRM_SEEDS} for one below it over the grid's seeds)",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="print everything as JSON, every raw result too")
]


@dataclass(frozen=True, slots=True)
class GridPlan:
    """What a grid run will do, before it starts.

    :param axes: the grid's axes.
    :param points: every point, in the grid's order.
    :param checkpoint: OUT/points.jsonl.
    :param writer: appends each fresh result to the checkpoint.
    :param reused: results of this build taken from the checkpoint (``--resume``).
    """

    axes: GridAxes
    points: tuple[GridPoint, ...]
    checkpoint: Path
    writer: CheckpointWriter
    reused: dict[GridPoint, GridResult]

    @property
    def todo(self) -> list[GridPoint]:
        """The points to simulate: those not reused."""
        return [p for p in self.points if p not in self.reused]


@dataclass(frozen=True, slots=True)
class GridOutputs:
    """What a finished run wrote and printed from.

    :param doc: the JSON document (OUT/results.json, and ``--json``).
    :param summary: the points' speedups over seeds.
    :param pngs: the heat maps, one per model.
    """

    doc: dict[str, object]
    summary: tuple[PointSummary, ...]
    pngs: list[Path]


def grid(
    models: ModelsOption = None,
    workloads: WorkloadsOption = None,
    dists: DistsOption = None,
    threads: ThreadsOption = None,
    paths: PathsOption = None,
    seeds: SeedsOption = None,
    ws_points: WsPointsOption = None,
    setup: SetupOption = "equal",
    unify: UnifyOption = "llc",
    file_kib: FileKibOption = 256,
    opens: OpensOption = False,
    read_kib: ReadKibOption = 0,
    quick: QuickOption = False,
    workers: WorkersOption = None,
    scheduler: SchedulerOption = None,
    out: OutOption = Path("build/grid"),
    resume: ResumeOption = False,
    check: CheckOption = False,
    as_json: JsonOption = False,
) -> None:
    """The MFC experiment over a grid of machines and workloads, in parallel on Dask.

    Axes: every model with several LLC groups x read, grep, wc, md5sum x uniform, Zipf x 1,
    4 and all threads x working sets (powers of two from half an LLC to twice the on-chip
    cache) x path (live, whatif) x seeds. Each point runs linux, unicache and oracle; its
    speedup is the median over seeds of unicache / linux. A point below 0.98x over the
    grid's seeds runs seeds up to 12, and is judged over those: its speedup moves by a few
    per cent between seeds where unicache steps aside.

    Prints, per model, workload and path, the min / median / max of the point speedups,
    the points below 0.98x and the worst one. Writes OUT/results.json (every raw result),
    OUT/grid.md (the table, for docs/PERFORMANCE.md) and OUT/grid-MODEL.png (heat maps).
    Each result is also appended to OUT/points.jsonl as it arrives: after an interruption,
    the same command with --resume runs only what is missing.

    Exit 2 on a user error; with --check, 1 if a point is below 0.98x.
    """
    req = GridRequest(
        models=_csv(models),
        workloads=_csv(workloads),
        dists=_csv(dists),
        threads=_csv(threads),
        paths=_csv(paths),
        seeds=seeds,
        ws_points=ws_points,
        quick=quick,
        setup=setup,
        file_kib=file_kib,
        read_kib=read_kib,
        unify=unify,
        opens=opens,
    )
    n_workers = default_workers() if workers is None else workers
    try:
        if n_workers < 1:
            raise ConfigError(f"--workers must be at least 1, not {n_workers}")
        plan = _plan(req, out, resume)
        run = _run_points(plan, n_workers, scheduler)
        outputs = _write_outputs(run, req, out)
    except ConfigError as err:
        user_error(err)
        return
    except UnicacheError as err:  # a point failed in the simulator: not the user's doing
        stderr.print(Text.assemble(("error:", "red"), f" {err}"), soft_wrap=True)
        raise typer.Exit(1) from None
    bad = regressions(outputs.summary)
    if as_json:
        emit_json(outputs.doc)
    else:
        _print_grid(run, bad, out, outputs.pngs)
    if check and bad:
        raise typer.Exit(1)


def _plan(req: GridRequest, out: Path, resume: bool) -> GridPlan:
    """The grid's points, the output directory made and the checkpoint opened (with what
    ``--resume`` reuses from it).

    :raises ConfigError: on a bad request, or a directory or checkpoint that cannot be used.
    """
    axes = build_axes(req)
    points = grid_points(axes)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create output directory {out}") from err
    checkpoint = out / CHECKPOINT_NAME
    build = build_fingerprint()
    try:
        reused = _reusable(checkpoint, build, points) if resume else {}
        writer = CheckpointWriter(checkpoint, build, reused.values())
    except OSError as err:
        raise ConfigError(f"cannot use the checkpoint {checkpoint}: {err.strerror}") from err
    return GridPlan(axes, points, checkpoint, writer, reused)


def _run_points(plan: GridPlan, n_workers: int, scheduler: str | None) -> GridRun:
    """Simulate the points not reused, then the confirmation seeds of those below the
    threshold, under a progress bar; every fresh result goes to the checkpoint as it
    arrives. Exit 130 on Ctrl-C, telling how to resume."""
    points, todo, checkpoint = plan.points, plan.todo, plan.checkpoint
    start = time.monotonic()
    columns = (TextColumn("{task.description}"), *counted_columns())
    done = len(points) - len(todo)
    bar = progress_steps(len(points), "starting workers", columns=columns, completed=done)
    with plan.writer, bar as steps:

        def step(result: GridResult) -> None:
            try:
                plan.writer.write(result)
            except OSError as err:
                raise ConfigError(f"cannot write to {checkpoint}: {err.strerror}") from err
            steps(result.point.label)

        try:
            fresh = run_grid(todo, n_workers, scheduler, step) if todo else ()
            by_point = {**plan.reused, **{r.point: r for r in fresh}}
            results = tuple(by_point[p] for p in points)
            # a point below the threshold over the grid's seeds is judged over more
            extra = confirmation_points(results)
            if extra:
                steps.add(len(extra))
                results += run_grid(extra, n_workers, scheduler, step)
        except KeyboardInterrupt:
            steps.stop()
            stderr.print(
                f"interrupted: finished points are in {checkpoint}; the same command with "
                "--resume runs only the rest",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
    seconds = time.monotonic() - start
    workers = 0 if scheduler else n_workers
    return GridRun(plan.axes, results, seconds, workers, scheduler, resumed=len(points) - len(todo))


def _write_outputs(run: GridRun, req: GridRequest, out: Path) -> GridOutputs:
    """OUT/results.json, OUT/grid.md and a heat map per model.

    :raises ConfigError: if OUT cannot be written.
    """
    doc = grid_document(run)
    command = _grid_command(req)
    try:
        (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "grid.md").write_text(markdown(run, command))
    except OSError as err:
        raise ConfigError(f"cannot write to {out}") from err
    summary = summarize_points(run.results)
    pngs = [out / f"grid-{m.model}.png" for m in run.axes.models]
    for m, png in zip(run.axes.models, pngs, strict=True):
        plot_model(run.axes, m, summary, png)
    return GridOutputs(doc, summary, pngs)


def _print_grid(run: GridRun, bad: tuple[PointSummary, ...], out: Path, pngs: list[Path]) -> None:
    """The summary table, the first ten points below the threshold, and what was written."""
    console = Console()
    console.print(rich_table(run))
    for p in bad[:10]:
        k = p.key
        per_seed = ", ".join(f"{s:.3f}" for s in p.speedups)
        console.print(
            f"[red]below {THRESHOLD}x:[/red] {k.model} {k.workload} {k.path} {p.label}: "
            f"{p.median:.3f} (per seed {per_seed})"
        )
    if len(bad) > 10:
        console.print(f"[red]... and {len(bad) - 10} more points below {THRESHOLD}x[/red]")
    written = ", ".join(str(f) for f in (out / "results.json", out / "grid.md", *pngs))
    console.print(f"written: {written}", soft_wrap=True)


def _reusable(
    checkpoint: Path, build: str, points: tuple[GridPoint, ...]
) -> dict[GridPoint, GridResult]:
    """The checkpoint's results of this build, telling the user what was dropped and why."""
    found = load_checkpoint(checkpoint, build)
    wanted = set(points)
    reused = {p: r for p, r in found.results.items() if p in wanted}
    notes = [f"resuming: {len(reused)} of {len(points)} points from {checkpoint}"]
    if found.stale:
        notes.append(f"{found.stale} written by another build dropped")
    if found.torn:
        notes.append(f"{found.torn} unreadable lines dropped")
    stderr.print("; ".join(notes), soft_wrap=True)
    return reused


def _grid_command(req: GridRequest) -> str:
    """The ``unicache-sim grid`` command line that reproduces a request (for grid.md)."""
    parts = ["unicache-sim grid"]
    if req.quick:
        parts.append("--quick")
    for flag, value in (
        ("--models", req.models),
        ("--workloads", req.workloads),
        ("--dists", req.dists),
        ("--threads", req.threads),
        ("--paths", req.paths),
    ):
        if value is not None:
            parts.append(f"{flag} {','.join(value)}")
    for flag, number in (("--seeds", req.seeds), ("--ws-points", req.ws_points)):
        if number is not None:
            parts.append(f"{flag} {number}")
    if req.setup != "equal":
        parts.append(f"--setup {req.setup}")
    if req.file_kib != FILE_BYTES // 1024:
        parts.append(f"--file-kib {req.file_kib}")
    if req.read_kib:
        parts.append(f"--read-kib {req.read_kib}")
    if req.unify != "llc":
        parts.append(f"--unify {req.unify}")
    if req.opens:
        parts.append("--opens")
    return " ".join(parts)
