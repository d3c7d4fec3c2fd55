"""Summary of a grid run: medians over seeds, spread per model x workload x path, outputs.

A point's speedup is the median over its seeds of unicache / linux: the grid's seeds, or
:data:`CONFIRM_SEEDS` of them for a point whose median over the grid's fell below
:data:`THRESHOLD` (:func:`confirmation_points`). A group (model,
workload, path) spans its points (popularity x threads x working set); its summary is
the min, median and max of their speedups, how many fall below :data:`THRESHOLD` and the
worst one. The same numbers go to a rich table, a markdown table and a JSON document.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from rich import box
from rich.table import Table

from unicache_sim.grid.sweep import GridAxes, GridPoint, GridResult

#: a point whose median speedup is below this is a regression (``--check`` fails)
THRESHOLD = 0.98
#: seeds (1..N) a point is judged over when its median over the grid's seeds falls below
#: THRESHOLD. Where SCU steps aside, a point's speedup moves by some 3 % from one seed to
#: the next (the threads' interleaving; opteron-16 read zipf 16t 8 MiB spans 0.969-1.017
#: over seeds 1-12, median 0.9995), so the median of the quick grid's 2 seeds or the small
#: grid's 5 can fall below THRESHOLD by chance, or by a real loss; more seeds tell which. A
#: point above THRESHOLD over the grid's seeds is not rerun: this can only turn a verdict
#: below into one over more seeds, never hide a point the grid's own seeds put below.
CONFIRM_SEEDS = 12


@dataclass(frozen=True, slots=True)
class PointKey:
    """A point of the grid without its seed."""

    model: str
    workload: str
    dist: str
    threads: int
    path: str
    ws_mb: float


@dataclass(frozen=True, slots=True)
class PointSummary:
    """One point over its seeds.

    :param key: the point.
    :param seeds: its seeds, ascending.
    :param speedups: unicache / linux per seed, in ``seeds`` order.
    :param median: median of ``speedups``: the point's speedup.
    :param of_oracle: median over seeds of unicache / oracle.
    """

    key: PointKey
    seeds: tuple[int, ...]
    speedups: tuple[float, ...]
    median: float
    of_oracle: float

    @property
    def label(self) -> str:
        """The point inside its group: popularity, threads and working set."""
        k = self.key
        return f"{k.dist} {k.threads}t {k.ws_mb:g} MiB"


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """The points of one model, workload and path.

    :param model: machine model.
    :param workload: workload.
    :param path: live or whatif.
    :param points: number of points.
    :param min: smallest point speedup.
    :param median: median point speedup.
    :param max: largest point speedup.
    :param below: points below :data:`THRESHOLD`.
    :param worst: the point with the smallest speedup.
    """

    model: str
    workload: str
    path: str
    points: int
    min: float
    median: float
    max: float
    below: int
    worst: PointSummary


@dataclass(frozen=True, slots=True)
class GridRun:
    """A finished grid.

    :param axes: its axes.
    :param results: every task's result, in grid order.
    :param seconds: wall-clock time of the run.
    :param workers: worker processes (of the local cluster; 0 with a scheduler).
    :param scheduler: the scheduler's address, if one was given.
    :param resumed: results taken from the checkpoint of an earlier run (``--resume``);
        ``seconds`` counts only this run.
    """

    axes: GridAxes
    results: tuple[GridResult, ...]
    seconds: float
    workers: int
    scheduler: str | None = None
    resumed: int = 0


def summarize_points(results: Sequence[GridResult]) -> tuple[PointSummary, ...]:
    """Group results by point and take the median over seeds.

    :param results: per-seed results.
    :returns: one summary per point, in order of first appearance.
    """
    by_key: dict[PointKey, list[GridResult]] = {}
    for r in results:
        by_key.setdefault(_key(r.point), []).append(r)
    out = []
    for key, runs in by_key.items():
        runs.sort(key=lambda r: r.point.seed)
        speedups = tuple(r.speedup for r in runs)
        out.append(
            PointSummary(
                key,
                tuple(r.point.seed for r in runs),
                speedups,
                statistics.median(speedups),
                statistics.median(r.outcome.of_oracle for r in runs),
            )
        )
    return tuple(out)


def summarize_groups(points: Sequence[PointSummary]) -> tuple[GroupSummary, ...]:
    """Spread of the point speedups per model, workload and path.

    :param points: point summaries.
    :returns: one summary per group, in order of first appearance.
    """
    by_group: dict[tuple[str, str, str], list[PointSummary]] = {}
    for p in points:
        by_group.setdefault((p.key.model, p.key.workload, p.key.path), []).append(p)
    out = []
    for (model, workload, path), members in by_group.items():
        medians = [p.median for p in members]
        out.append(
            GroupSummary(
                model,
                workload,
                path,
                len(members),
                min(medians),
                statistics.median(medians),
                max(medians),
                sum(1 for m in medians if m < THRESHOLD),
                min(members, key=lambda p: p.median),
            )
        )
    return tuple(out)


def confirmation_points(results: Sequence[GridResult]) -> tuple[GridPoint, ...]:
    """The runs that take every point below :data:`THRESHOLD` to :data:`CONFIRM_SEEDS`
    seeds: its seeds of 1..CONFIRM_SEEDS it has not run, in a stable order."""
    below = {p.key: set(p.seeds) for p in regressions(summarize_points(results))}
    extra: list[GridPoint] = []
    for r in results:
        key = _key(r.point)
        if key in below:
            have = below.pop(key)
            extra += [replace(r.point, seed=s) for s in range(1, CONFIRM_SEEDS + 1)
                      if s not in have]
    return tuple(extra)


def _key(p: GridPoint) -> PointKey:
    return PointKey(p.model, p.workload, p.dist, p.threads, p.path, p.ws_mb)


def regressions(points: Sequence[PointSummary]) -> tuple[PointSummary, ...]:
    """The points whose median speedup is below :data:`THRESHOLD`, worst first."""
    return tuple(sorted((p for p in points if p.median < THRESHOLD), key=lambda p: p.median))


def grid_document(run: GridRun) -> dict[str, object]:
    """Everything as one JSON-ready document: axes, groups, points and raw results."""
    points = summarize_points(run.results)
    groups = summarize_groups(points)
    return {
        "threshold": THRESHOLD,
        "seconds": run.seconds,
        "workers": run.workers,
        "scheduler": run.scheduler,
        "resumed": run.resumed,
        "axes": asdict(run.axes),
        "groups": [
            {**{k: v for k, v in asdict(g).items() if k != "worst"}, "worst": _point_doc(g.worst)}
            for g in groups
        ],
        "points": [_point_doc(p) for p in points],
        "results": [
            {
                **asdict(r.point),
                "speedup": r.speedup,
                "of_oracle": r.outcome.of_oracle,
                "baselines": {b.baseline: asdict(b) for b in r.outcome.results},
            }
            for r in run.results
        ],
    }


def markdown(run: GridRun, command: str) -> str:
    """The group table in markdown, with a line naming the run (for docs/PERFORMANCE.md).

    :param run: the grid.
    :param command: the command line that produced it.
    """
    groups = summarize_groups(summarize_points(run.results))
    seeds = run.axes.seeds
    took = f"{run.seconds:.0f} s"
    if run.resumed:
        took += f" after {run.resumed} runs resumed from an earlier run's checkpoint"
    lines = [
        f"`{command}` ({len(run.results)} runs, seeds {seed_range(seeds)}, "
        f"{took}). Speedup = unicache / linux, median over seeds per point (seeds "
        f"1-{CONFIRM_SEEDS} for a point below {THRESHOLD}x over those); "
        f"min / median / max over the points of a row (popularity x threads x working set); "
        f"< {THRESHOLD}x counts points below {THRESHOLD}.",
        "",
        f"| model | workload | path | points | min | median | max | < {THRESHOLD}x | worst point |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        lines.append(
            f"| {g.model} | {g.workload} | {g.path} | {g.points} | {g.min:.2f} | "
            f"{g.median:.2f} | {g.max:.2f} | {g.below} | "
            f"{g.worst.label}: {g.worst.median:.2f} |"
        )
    return "\n".join(lines) + "\n"


def rich_table(run: GridRun) -> Table:
    """The group table for the terminal (fits 80 columns with the shipped model names)."""
    groups = summarize_groups(summarize_points(run.results))
    table = Table(
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
        pad_edge=False,
        title=f"unicache / linux, median over seeds {seed_range(run.axes.seeds)} per point "
        f"(1-{CONFIRM_SEEDS} below {THRESHOLD}x)",
        caption=f"min / med / max over the points of a row; <{THRESHOLD}: points below it; "
        f"{len(run.results)} runs in {run.seconds:.0f} s",
    )
    for col in ("model", "workload", "path"):
        table.add_column(col, no_wrap=True)
    for col in ("pts", "min", "med", "max", f"<{THRESHOLD}"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("worst point")
    for g in groups:
        below = f"[red]{g.below}[/red]" if g.below else "0"
        w = g.worst.key
        table.add_row(
            g.model,
            g.workload,
            g.path,
            str(g.points),
            f"{g.min:.2f}",
            f"{g.median:.2f}",
            f"{g.max:.2f}",
            below,
            f"{w.dist} {w.threads}t {w.ws_mb:g}M {g.worst.median:.2f}",
        )
    return table


def _point_doc(p: PointSummary) -> dict[str, object]:
    return {
        **asdict(p.key),
        "seeds": list(p.seeds),
        "speedups": list(p.speedups),
        "median": p.median,
        "of_oracle": p.of_oracle,
    }


def seed_range(seeds: Sequence[int]) -> str:
    """Seeds for humans: ``1-5`` for a run of consecutive seeds, else a list."""
    if len(seeds) > 1 and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)
