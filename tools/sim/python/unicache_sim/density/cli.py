"""The front end of ``unicache density`` (and ``unicache-sim density``): options in, report out.

The host CLI (``unicache.cli.density``) parses the flags and imports this module only
when the command runs, so that ``unicache`` never needs the simulator to start. Outputs,
in ``--out`` (default ``build/density``): ``density.json`` (what ``--json`` prints),
``points.parquet`` (every point, every parameter: :mod:`unicache_sim.density.store`),
the plots (:mod:`unicache_sim.density.plot`) and ``cache/`` (finished points, reused by a
rerun of the same build).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from unicache.errors import ConfigError

from unicache_sim.build import build_fingerprint
from unicache_sim.dask_client import default_workers
from unicache_sim.density.experiment import DensityRequest, check_request, run_density
from unicache_sim.density.mixes import load_mixes, random_mixes
from unicache_sim.density.plot import plot_all
from unicache_sim.density.point import DensityTiming
from unicache_sim.density.points import PointResult, Runner
from unicache_sim.density.report import document, rows, summary
from unicache_sim.density.store import (
    CACHE_DIR,
    POINTS_FILE,
    PointCache,
    write_points,
)
from unicache_sim.density.tenants import Catalogue, load_catalogue

#: default output directory
DEFAULT_OUT = Path("build/density")
#: the most random mixes one run may ask for
MAX_RANDOM_MIXES = 1000


@dataclass(frozen=True, slots=True)
class DensityOptions:
    """The command's options, as parsed by the CLI.

    :param model: the machine model.
    :param mix: a mix file (TOML ``[[mix]]`` tables), or ``None``.
    :param random_mixes: that many random mixes, or 0.
    :param policies: comma-separated policies.
    :param seeds: seeds per point.
    :param json_out: print JSON instead of the table.
    :param out: output directory.
    :param scheduler: a Dask scheduler's address, or ``None`` (a local cluster).
    :param workers: local worker processes (0: this machine's CPUs).
    :param catalogue: a catalogue file, or ``None`` (the shipped one).
    :param overcommit: vCPUs per CPU the hosts admit.
    :param tolerance: the search's tolerance, as a share of N (0: to one VM).
    :param mix_seed: the seed of the random mixes.
    :param window_ms: a sampled interval, simulated milliseconds.
    :param argv: the command line, for the report.
    """

    model: str
    mix: Path | None = None
    random_mixes: int = 0
    policies: str = "linux,unicache"
    seeds: int = 1
    json_out: bool = False
    out: Path = DEFAULT_OUT
    scheduler: str | None = None
    workers: int = 0
    catalogue: Path | None = None
    overcommit: float = 4.0
    tolerance: float = 0.05
    mix_seed: int = 1
    window_ms: float = 1.0
    argv: str = ""


def build_request(opts: DensityOptions) -> tuple[DensityRequest, Catalogue]:
    """Check the options and build the experiment.

    :raises ConfigError: one line naming the problem; a catalogue or mix file with
        problems raises :class:`~unicache_sim.density.tenants.CatalogueError` (one line each).
    """
    if (opts.mix is None) == (opts.random_mixes == 0):
        raise ConfigError("give exactly one of --mix FILE and --random-mixes N")
    if not 0 <= opts.random_mixes <= MAX_RANDOM_MIXES:
        raise ConfigError(f"--random-mixes must be within 1..{MAX_RANDOM_MIXES}")
    if not 0.05 <= opts.window_ms <= 100:
        raise ConfigError(f"--window-ms must be within 0.05..100, not {opts.window_ms:g}")
    catalogue = load_catalogue(opts.catalogue)
    if opts.mix is not None:
        mixes = load_mixes(opts.mix, catalogue)
    else:
        mixes = random_mixes(catalogue, opts.random_mixes, opts.mix_seed)
    policies = tuple(p.strip() for p in opts.policies.split(",") if p.strip())
    timing = replace(DensityTiming(), window_s=opts.window_ms / 1000)
    req = DensityRequest(
        opts.model,
        catalogue,
        mixes,
        policies,
        opts.seeds,
        opts.overcommit,
        timing,
        opts.tolerance,
    )
    return req, catalogue


class _Bar:
    """The progress bar on stderr: points done (cached ones too) of an estimate."""

    def __init__(self, req: DensityRequest, console: Console) -> None:
        # probes a search takes, typically: from the guess (gallop, then narrowing), and
        # near the answer of the policy before
        per_mix = 6 + 3 * (len(req.policies) - 1)
        judged = {f for m in req.mixes for f, _ in m.weights}
        self.total = req.seeds * (2 * len(judged) + per_mix * len(req.mixes))
        self.done = 0
        self.cached = 0
        self.progress = Progress(
            TextColumn("density"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("", total=self.total)

    def __call__(self, result: PointResult, cached: bool) -> None:
        self.done += 1
        self.cached += cached
        self.total = max(self.total, self.done + 1)
        self.progress.update(
            self.task,
            completed=self.done,
            total=self.total,
            description=f"{result.point.label}" + (" (cached)" if cached else ""),
        )


def run_command(opts: DensityOptions) -> int:
    """Run ``unicache density`` and print its report; returns the exit code.

    :raises ConfigError: on a user error (the CLI prints it, exit 2).
    """
    req, _catalogue = build_request(opts)
    check_request(req)
    try:
        opts.out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot write --out {opts.out}") from err
    build = build_fingerprint()
    cache = PointCache(opts.out / CACHE_DIR, build)
    bar = _Bar(req, Console(stderr=True))
    start = time.monotonic()
    workers = opts.workers or default_workers()
    with bar.progress, Runner(workers, opts.scheduler, cache.lookup, cache.store, bar) as runner:
        report = run_density(req, runner)
    seconds = time.monotonic() - start
    doc = document(report, seconds, opts.argv)
    try:
        (opts.out / "density.json").write_text(json.dumps(doc, indent=1) + "\n")
        write_points(opts.out / POINTS_FILE, report.points, build)
        plots = plot_all(report, opts.out)
    except OSError as error:
        raise ConfigError(f"cannot write the results into {opts.out}") from error
    if opts.json_out:
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    _print_table(report, seconds, opts.out, plots)
    return 0


def _print_table(report_: object, seconds: float, out: Path, plots: list[Path]) -> None:
    from unicache_sim.density.experiment import DensityReport

    assert isinstance(report_, DensityReport)
    report = report_
    req = report.request
    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(
        title=(
            f"{req.model}: VMs per host at the SLO ({req.seeds} seed(s) pooled, "
            f"overcommit {req.overcommit:g}, tolerance {req.tolerance:g})"
        )
    )
    table.add_column("mix")
    table.add_column("flavors")
    table.add_column("file-heavy")
    for policy in req.policies:
        table.add_column(f"{policy} VMs", justify="right")
    if set(req.policies) >= {"linux", "unicache"}:
        table.add_column("unicache / linux", justify="right")
    for policy in req.policies:
        table.add_column(f"{policy}: what binds")
    for row in rows(report):
        cells = [row["mix"], row["flavors"], "yes" if row["file_heavy"] else "no"]
        cells += [f"{row.get(p, '-')} of {row.get(f'{p}_cap', '-')}" for p in req.policies]
        if set(req.policies) >= {"linux", "unicache"}:
            ratio = row["ratio"]
            cells.append("-" if math.isnan(ratio) else f"{ratio:.2f}")
        cells += [str(row.get(f"{p}_binding", "-")) for p in req.policies]
        table.add_row(*cells)
    console.print(table)
    refs = ", ".join(
        f"{r.flavor} p95 {r.p95_us:.1f} us" if math.isfinite(r.p95_us)
        else f"{r.flavor} {r.mb_per_s:.0f} MB/s"
        for r in report.references
    )
    console.print(f"alone on {req.model} (linux): {refs}", highlight=False)
    s = summary(report)
    if s["mixes"]:
        console.print(
            f"density ratio over {s['mixes']} mix(es): min {s['min_ratio']:.2f}, median "
            f"{s['median_ratio']:.2f}, max {s['max_ratio']:.2f}; file-heavy mixes: "
            f"{s['file_heavy_mixes']}"
            + (f" (min {s['file_heavy_min_ratio']:.2f})" if s["file_heavy_mixes"] else "")
            + f"; below linux: {s['mixes_below_linux']}",
            highlight=False,
        )
    console.print(
        f"{len(report.points)} points ({report.cached} from the cache) in {seconds:.0f} s; "
        f"results in {out}/ (density.json, {POINTS_FILE}, "
        + ", ".join(p.name for p in plots)
        + ")",
        highlight=False,
    )
