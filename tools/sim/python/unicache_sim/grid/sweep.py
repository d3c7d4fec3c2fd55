"""The grid: the MFC experiment over every multi-LLC model and axis, run on Dask.

One *point* is (model, workload, popularity, threads, path, working set, seed); its task
runs all three baselines (linux, unicache, oracle) with
:func:`unicache_sim.experiments.mfc.read.run_mfc` at that one size and returns a small
frozen :class:`GridResult`. The axes come from the shipped models, not from a list kept
here:

* models: every shipped model with more than one LLC group (one LLC leaves nothing to
  unify), found with :func:`unicache.topology.toml.model_names` / ``load_model``;
* threads: 1, 4 and all CPUs of the model (counts above its CPUs dropped);
* working sets: powers of two from half of one LLC group's LLC up to twice the machine's
  aggregate on-chip cache (every instance of every level, as the oracle merges them);
* workloads, popularity and paths: ``unicache_sim.experiments.mfc.read``'s ``WORKLOADS``,
  ``DISTRIBUTIONS`` and ``PATHS``; seeds 1..N.

:func:`run_grid` runs the points on a ``dask.distributed`` cluster: a ``LocalCluster`` of
one-threaded worker processes, or an existing scheduler.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from unicache.errors import ConfigError, UnicacheError
from unicache.topology import Topology, Unify
from unicache.topology.toml import load_model, model_names

from unicache_sim.dask_client import dask_client
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.mfc.read import PointResult, run_mfc
from unicache_sim.experiments.mfc.spec import (
    DISTRIBUTIONS,
    FILE_BYTES,
    MIB,
    PATHS,
    SETUPS,
    WORKLOADS,
    MfcSpec,
)

#: thread counts of the grid besides "all CPUs of the model"
BASE_THREADS = (1, 4)
#: seeds of a full grid
DEFAULT_SEEDS = 5

# --quick: a smoke subset of every axis not given explicitly (docs/simulator.md, "Grid")
#: quick models: the multi-LLC models with at most this many CPUs
QUICK_MAX_CPUS = 16
QUICK_WORKLOADS = ("read",)
#: quick threads: 1 and all CPUs of the model
QUICK_THREADS = ("1", "all")
#: quick working sets: smallest, middle and largest of the series
QUICK_WS_POINTS = 3
QUICK_SEEDS = 2


@dataclass(frozen=True, slots=True)
class ModelAxes:
    """The axes that depend on one machine model.

    :param model: model name.
    :param cpus: its logical CPUs.
    :param llc_groups: its LLC groups.
    :param threads: reader thread counts, ascending.
    :param ws_mb: working sets in MiB, ascending.
    """

    model: str
    cpus: int
    llc_groups: int
    threads: tuple[int, ...]
    ws_mb: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class GridAxes:
    """Every axis of one grid.

    :param models: per-model axes, in model-name order.
    :param workloads: read, grep, wc, md5sum (a subset).
    :param dists: uniform, zipf (a subset).
    :param paths: live, whatif (a subset).
    :param seeds: the seeds every point runs with.
    :param setup: ``MfcSpec.setup`` of every point (passed through).
    :param file_bytes: ``MfcSpec.file_bytes`` of every point (large files: a scan).
    :param read_bytes: ``MfcSpec.read_bytes`` of every point (the program's buffer).
    :param unify: ``MfcSpec.unify`` of every point (the daemon's ``--unify``).
    :param opens: ``MfcSpec.opens`` of every point (the readers open each file they read).
    """

    models: tuple[ModelAxes, ...]
    workloads: tuple[str, ...]
    dists: tuple[str, ...]
    paths: tuple[str, ...]
    seeds: tuple[int, ...]
    setup: str = "equal"
    file_bytes: int = FILE_BYTES
    read_bytes: int = 0
    unify: str = "llc"
    opens: bool = False


@dataclass(frozen=True, slots=True, order=True)
class GridPoint:
    """One task of the grid: one seed of one experiment at one working set."""

    model: str
    workload: str
    dist: str
    threads: int
    path: str
    ws_mb: float
    seed: int
    setup: str = "equal"
    file_bytes: int = FILE_BYTES
    read_bytes: int = 0
    unify: str = "llc"
    opens: bool = False

    @property
    def label(self) -> str:
        """Short human name of the point."""
        return (
            f"{self.model} {self.workload} {self.dist} {self.threads}t {self.path} "
            f"{self.ws_mb:g} MiB s{self.seed}"
        )


@dataclass(frozen=True, slots=True)
class GridResult:
    """What one task returns: its point and the three baselines at its working set.

    :param point: the point.
    :param outcome: linux, unicache and oracle (``PointResult``).
    """

    point: GridPoint
    outcome: PointResult

    @property
    def speedup(self) -> float:
        """unicache over linux."""
        return self.outcome.speedup


@dataclass(frozen=True, slots=True)
class GridRequest:
    """The user's narrowing of the axes (``None``: the default of that axis).

    :param models: model names.
    :param workloads: workloads.
    :param dists: popularity distributions.
    :param threads: thread counts as given: integers or ``all``.
    :param paths: live and/or whatif.
    :param seeds: number of seeds.
    :param ws_points: working sets per model, spread over the series.
    :param quick: take the ``--quick`` subset for every axis left at ``None``.
    :param setup: ``equal`` or ``parallel``.
    :param file_kib: size of every file, KiB.
    :param read_kib: KiB per read call of the guest's program (0: one call per chunk).
    :param unify: the daemon's unification level, ``llc`` or ``l2``.
    :param opens: the readers open each file they read (``MfcSpec.opens``).
    """

    models: tuple[str, ...] | None = None
    workloads: tuple[str, ...] | None = None
    dists: tuple[str, ...] | None = None
    threads: tuple[str, ...] | None = None
    paths: tuple[str, ...] | None = None
    seeds: int | None = None
    ws_points: int | None = None
    quick: bool = False
    setup: str = "equal"
    file_kib: int = FILE_BYTES // 1024
    read_kib: int = 0
    unify: str = "llc"
    opens: bool = False


def multi_llc_models(names: Sequence[str] | None = None) -> tuple[str, ...]:
    """The models with more than one LLC group.

    :param names: candidate model names (default: every shipped model).
    :returns: the multi-LLC ones, in the given order.
    """
    return tuple(n for n in (names or model_names()) if len(_model(n).llc_groups()) > 1)


def on_chip_bytes(topo: Topology) -> int:
    """Aggregate on-chip cache: every instance of every level (the oracle's total)."""
    return from_topology(topo).on_chip_bytes()


def ws_series(topo: Topology) -> tuple[float, ...]:
    """Working sets in MiB: powers of two from half an LLC to twice the on-chip total.

    :param topo: the machine model.
    :returns: ``lo, 2 lo, 4 lo, ...`` up to ``2 * on_chip_bytes(topo)``, with
        ``lo = topo.llc.size_bytes / 2``.
    """
    lo = topo.llc.size_bytes / 2 / MIB
    hi = 2 * on_chip_bytes(topo) / MIB
    steps = math.floor(math.log2(hi / lo) + 1e-9) if hi >= lo else 0
    return tuple(lo * 2**k for k in range(steps + 1))


def thread_counts(topo: Topology) -> tuple[int, ...]:
    """1, 4 and all CPUs of the model, without counts above its CPUs."""
    n = len(topo.cpus)
    return tuple(sorted({t for t in (*BASE_THREADS, n) if t <= n}))


def spread(values: Sequence[float], count: int) -> tuple[float, ...]:
    """``count`` values spread evenly over ``values``, both ends kept (1: the upper middle)."""
    if count >= len(values):
        return tuple(values)
    if count == 1:
        return (values[len(values) // 2],)
    # halves round up, as the middle of an even series does
    picks = sorted({math.floor(i * (len(values) - 1) / (count - 1) + 0.5) for i in range(count)})
    return tuple(values[i] for i in picks)


def model_axes(
    name: str, threads: tuple[str, ...] | None = None, ws_points: int | None = None
) -> ModelAxes:
    """The axes of one model.

    :param name: model name.
    :param threads: thread counts (integers or ``all``); default 1, 4 and all CPUs.
    :param ws_points: working sets to keep, spread over the series; default all.
    :raises ConfigError: on a thread count that is not a positive integer or ``all``.
    """
    topo = _model(name)
    n = len(topo.cpus)
    if threads is None:
        counts = thread_counts(topo)
    else:
        counts = tuple(sorted({c for c in (_thread_count(t, n) for t in threads) if c <= n}))
    series = ws_series(topo)
    ws = series if ws_points is None else spread(series, ws_points)
    return ModelAxes(name, n, len(topo.llc_groups()), counts, ws)


def build_axes(req: GridRequest) -> GridAxes:
    """Check the request and build the axes.

    :raises ConfigError: naming the first bad value, in one line.
    """
    known = model_names()
    if req.models is not None:
        for name in req.models:
            if name not in known:
                raise ConfigError(f"no machine model {name!r} (known: {', '.join(known)})")
        multi = multi_llc_models(req.models)
        for name in req.models:
            if name not in multi:
                raise ConfigError(
                    f"model {name!r} has one LLC group: nothing to unify "
                    f"(multi-LLC models: {', '.join(multi_llc_models())})"
                )
        models = tuple(dict.fromkeys(req.models))
    elif req.quick:
        models = tuple(m for m in multi_llc_models() if len(_model(m).cpus) <= QUICK_MAX_CPUS)
    else:
        models = multi_llc_models()
    if not models:
        raise ConfigError("no shipped machine model has several LLC groups")
    workloads = _pick("--workloads", req.workloads, WORKLOADS, QUICK_WORKLOADS, req.quick)
    dists = _pick("--dists", req.dists, DISTRIBUTIONS, DISTRIBUTIONS, req.quick)
    paths = _pick("--paths", req.paths, PATHS, PATHS, req.quick)
    if req.setup not in SETUPS:
        raise ConfigError(f"--setup must be one of {', '.join(SETUPS)}, not {req.setup!r}")
    n_seeds = req.seeds if req.seeds is not None else QUICK_SEEDS if req.quick else DEFAULT_SEEDS
    if n_seeds < 1:
        raise ConfigError(f"--seeds must be at least 1, not {n_seeds}")
    ws_points = QUICK_WS_POINTS if req.ws_points is None and req.quick else req.ws_points
    if ws_points is not None and ws_points < 1:
        raise ConfigError(f"--ws-points must be at least 1, not {ws_points}")
    threads = req.threads if req.threads is not None else QUICK_THREADS if req.quick else None
    # a model with fewer CPUs than every thread count asked for drops out
    axes = tuple(a for a in (model_axes(m, threads, ws_points) for m in models) if a.threads)
    if not axes:
        raise ConfigError(f"no model has the CPUs for --threads {','.join(threads or ())}")
    if not 4 <= req.file_kib <= 1 << 20:
        raise ConfigError(f"--file-kib must be within 4..1048576, not {req.file_kib}")
    if not 0 <= req.read_kib <= 1 << 20:
        raise ConfigError(f"--read-kib must be within 0..1048576, not {req.read_kib}")
    if req.unify not in {u.value for u in Unify}:
        raise ConfigError(
            f"--unify must be one of {', '.join(u.value for u in Unify)}, not {req.unify!r}"
        )
    return GridAxes(
        axes,
        workloads,
        dists,
        paths,
        tuple(range(1, n_seeds + 1)),
        req.setup,
        req.file_kib * 1024,
        req.read_kib * 1024,
        req.unify,
        req.opens,
    )


def grid_points(axes: GridAxes) -> tuple[GridPoint, ...]:
    """Every point of the grid, in a stable order."""
    return tuple(
        GridPoint(
            m.model,
            w,
            d,
            t,
            p,
            ws,
            s,
            axes.setup,
            axes.file_bytes,
            axes.read_bytes,
            axes.unify,
            axes.opens,
        )
        for m in axes.models
        for w in axes.workloads
        for d in axes.dists
        for t in m.threads
        for p in axes.paths
        for ws in m.ws_mb
        for s in axes.seeds
    )


def run_point(point: GridPoint) -> GridResult:
    """Simulate one point: the three baselines at its working set (a Dask task).

    :param point: the point.
    :returns: its result.
    """
    spec = MfcSpec(
        workload=point.workload,
        dist=point.dist,
        threads=point.threads,
        path=point.path,
        setup=point.setup,
        seed=point.seed,
        file_bytes=point.file_bytes,
        read_bytes=point.read_bytes,
        unify=point.unify,
        opens=point.opens,
    )
    result = GridResult(point, run_mfc(_model(point.model), spec, [point.ws_mb])[0])
    # the native engine may only be dropped on the thread that made it: collect whatever
    # cycle still holds one here, not later on the worker's event loop thread
    gc.collect()
    return result


def run_grid(
    points: Sequence[GridPoint],
    workers: int,
    scheduler: str | None = None,
    progress: Callable[[GridResult], None] | None = None,
) -> tuple[GridResult, ...]:
    """Run every point on a Dask cluster.

    :param points: the points.
    :param workers: worker processes of the local cluster (one thread each).
    :param scheduler: address of an existing scheduler; its workers must import
        ``unicache_sim`` (``None``: start a local cluster).
    :param progress: called with each result as it completes.
    :returns: the results, in the order of ``points``.
    :raises ConfigError: if dask is missing or the scheduler cannot be reached.
    :raises UnicacheError: if a point fails in the simulator (naming the point).
    """
    # the largest working sets first (they run longest), so that the last tasks are short
    order = sorted(points, key=lambda p: -max(p.ws_mb, 16.0))
    done: dict[GridPoint, GridResult] = {}
    with dask_client(workers, scheduler, "grid") as client:
        from distributed import as_completed

        futures = client.map(run_point, order, pure=False)
        point_of = {f.key: p for f, p in zip(futures, order, strict=True)}
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            try:
                result: GridResult = future.result()
            except UnicacheError as err:
                raise UnicacheError(f"grid point {point_of[future.key].label}: {err}") from err
            except Exception as err:  # a bug: keep the worker's traceback, name the point
                err.add_note(f"grid point: {point_of[future.key].label}")
                raise
            done[result.point] = result
            if progress is not None:
                progress(result)
    return tuple(done[p] for p in points)


@cache
def _model(name: str) -> Topology:
    return load_model(name)


def _thread_count(text: str, n_cpus: int) -> int:
    if text.strip() == "all":
        return n_cpus
    try:
        value = int(text)
    except ValueError as err:
        raise ConfigError(f"--threads wants integers or 'all', not {text!r}") from err
    if value < 1:
        raise ConfigError(f"--threads must be at least 1, not {value}")
    return value


def _pick(
    flag: str,
    given: tuple[str, ...] | None,
    known: tuple[str, ...],
    quick: tuple[str, ...],
    is_quick: bool,
) -> tuple[str, ...]:
    if given is None:
        return quick if is_quick else known
    for value in given:
        if value not in known:
            raise ConfigError(f"{flag}: unknown {value!r} (known: {', '.join(known)})")
    if not given:
        raise ConfigError(f"{flag} needs at least one value")
    return tuple(dict.fromkeys(given))
