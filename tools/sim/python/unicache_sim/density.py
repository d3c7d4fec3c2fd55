"""The density experiment: references alone, then a search per mix and policy, on Dask.

One *point* is (mix, N, policy, seed); its task runs
:func:`unicache_sim.experiments.density_point.run_point` and returns a small frozen
:class:`PointResult`. The experiment (:func:`run_density`) has three stages:

1. **service**: one VM of each flavor alone under Linux, requests back to back, per seed:
   a latency flavor's mean service time gives its request rate
   (``utilization / service``, the same for every point), a batch flavor's throughput
   alone is its reference;
2. **alone**: one VM of each latency flavor alone under Linux at that rate, per seed, for
   ``ALONE_MEASURE`` times as long as a point: the p95 its SLO is relative to;
3. **search**: for every mix and policy a :class:`~unicache_sim.density_search.DensitySearch`
   proposes N; the seeds of one N run as tasks at once, their requests pooled for the
   verdict; searches of all mixes and policies run side by side.

Points run on a ``dask.distributed`` cluster: a ``LocalCluster`` of one-threaded worker
processes (default: this machine's CPUs), or the scheduler at ``--scheduler``. A point's
result depends on its parameters only (every draw is seeded by them), so it is the same
bit for bit wherever it runs. Finished points are kept in a cache
(:mod:`unicache_sim.density_store`), so a rerun runs only what is missing.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from unicache.errors import ConfigError, UnicacheError
from unicache.topology import Topology
from unicache.topology.toml import load_model, model_names

from unicache_sim.config import from_topology
from unicache_sim.density_search import (
    DensitySearch,
    Reference,
    SloCheck,
    check_point,
    guess,
    pooled_p95,
    references_needed,
    worst_ratio,
)
from unicache_sim.experiments.density_point import (
    POLICIES,
    DensityTiming,
    PointOutcome,
    PointSpec,
    admit_linux,
    place_unicache,
    run_point,
)
from unicache_sim.tenants import Catalogue, Flavor, Mix, SloKind, mix_vms

#: the alone runs measure this many times as many intervals as a point (a reference's
#: p95 from one VM's requests needs more of them than a host full of VMs gives)
ALONE_MEASURE = 6
#: the most VMs a search considers (a bound on the admission cap)
MAX_VMS = 1024
#: stages of a point
STAGES = ("service", "alone", "search")


@dataclass(frozen=True, slots=True)
class DensityPoint:
    """One task: one seed of one N of one mix under one policy.

    :param stage: service, alone or search.
    :param model: the machine model.
    :param mix: the mix's name (``alone`` for the first two stages).
    :param n: VMs.
    :param policy: linux or unicache.
    :param seed: the seed.
    :param flavors: the VMs' flavor definitions, in arrival order.
    :param rates: (flavor, requests per second per vCPU) of the latency tenants.
    :param overcommit: vCPUs per CPU the host admits.
    :param timing: how long the point runs.
    """

    stage: str
    model: str
    mix: str
    n: int
    policy: str
    seed: int
    flavors: tuple[Flavor, ...]
    rates: tuple[tuple[str, float], ...]
    overcommit: float
    timing: DensityTiming

    @property
    def label(self) -> str:
        """Short human name of the point."""
        return f"{self.stage} {self.mix} N={self.n} {self.policy} s{self.seed}"

    def spec(self) -> PointSpec:
        """The simulator's spec of this point."""
        return PointSpec(self.flavors, self.policy, self.seed, self.rates, self.overcommit,
                         self.timing)


@dataclass(frozen=True, slots=True)
class PointResult:
    """What one task returns.

    :param point: the point.
    :param outcome: what it measured.
    """

    point: DensityPoint
    outcome: PointOutcome


@dataclass(frozen=True, slots=True)
class Probe:
    """One N of one search: the seeds' outcomes and the SLO checks, pooled.

    :param n: VMs.
    :param checks: every SLO (empty when not admitted).
    :param admitted: whether the host admitted the N VMs.
    :param outcomes: per seed, its outcome.
    """

    n: int
    checks: tuple[SloCheck, ...]
    admitted: bool
    outcomes: tuple[PointOutcome, ...]

    @property
    def ratio(self) -> float:
        """The worst SLO ratio (inf when not admitted)."""
        return worst_ratio(self.checks) if self.admitted else math.inf


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The density of one mix under one policy.

    :param mix: the mix.
    :param policy: linux or unicache.
    :param cap: the most VMs the host admits.
    :param vms: the largest N meeting every SLO.
    :param probes: every N measured, in order.
    """

    mix: Mix
    policy: str
    cap: int
    vms: int
    probes: tuple[Probe, ...]


@dataclass(frozen=True, slots=True)
class DensityRequest:
    """One experiment.

    :param model: the machine model.
    :param catalogue: the flavors.
    :param mixes: the mixes.
    :param policies: linux and/or unicache.
    :param seeds: seeds 1..seeds.
    :param overcommit: vCPUs per CPU both hosts admit.
    :param timing: how long every point runs.
    :param tolerance: the search stops within this share of N (0: to one VM).
    """

    model: str
    catalogue: Catalogue
    mixes: tuple[Mix, ...]
    policies: tuple[str, ...] = POLICIES
    seeds: int = 1
    overcommit: float = 4.0
    timing: DensityTiming = field(default_factory=DensityTiming)
    tolerance: float = 0.0


@dataclass(frozen=True, slots=True)
class DensityReport:
    """What the experiment found.

    :param request: what was asked.
    :param references: per flavor, its reference alone.
    :param searches: per mix and policy, in mix then policy order.
    :param points: every point's result, in the order they were asked for.
    :param cached: points taken from the cache.
    """

    request: DensityRequest
    references: tuple[Reference, ...]
    searches: tuple[SearchResult, ...]
    points: tuple[PointResult, ...]
    cached: int

    def search(self, mix: str, policy: str) -> SearchResult | None:
        """The search of one mix and policy."""
        return next(
            (s for s in self.searches if s.mix.name == mix and s.policy == policy), None
        )


def run_task(point: DensityPoint) -> PointResult:
    """Simulate one point (a Dask task)."""
    result = PointResult(point, run_point(_model(point.model), point.spec()))
    # the native engine may only be dropped on the thread that made it (see grid.py)
    gc.collect()
    return result


def check_request(req: DensityRequest) -> Topology:
    """Check what cannot be checked by the parsers; return the model.

    :raises ConfigError: naming the first problem, in one line.
    """
    if req.model not in model_names():
        raise ConfigError(f"no machine model {req.model!r} (known: {', '.join(model_names())})")
    for policy in req.policies:
        if policy not in POLICIES:
            raise ConfigError(f"--policies: unknown {policy!r} (known: {', '.join(POLICIES)})")
    if not req.policies:
        raise ConfigError("--policies needs at least one policy")
    if req.seeds < 1:
        raise ConfigError(f"--seeds must be at least 1, not {req.seeds}")
    if not req.mixes:
        raise ConfigError("no mix to run (--mix FILE or --random-mixes N)")
    if not 1.0 <= req.overcommit <= 16.0:
        raise ConfigError(f"--overcommit must be within 1..16, not {req.overcommit:g}")
    if not 0.0 <= req.tolerance < 1.0:
        raise ConfigError(f"--tolerance must be within 0..1, not {req.tolerance:g}")
    return _model(req.model)


def admission_cap(topo: Topology, flavors: Sequence[Flavor], policy: str,
                  overcommit: float) -> int:
    """The most of the first VMs of ``flavors`` the host admits under ``policy``: Linux
    by vCPU slots and memory, unicache by ``unicache place`` refusing one."""
    lo, hi = 0, len(flavors)  # the answer is in [lo, hi]; lo admitted
    while lo < hi:
        mid = (lo + hi + 1) // 2
        part = flavors[:mid]
        if policy == "linux":
            refused = admit_linux(topo, part, overcommit)
        else:
            refused = place_unicache(topo, part, overcommit)[1]
        if refused:
            hi = mid - 1
        else:
            lo = mid
    return lo


class Runner:
    """Runs points on Dask, taking what the cache has.

    :param workers: worker processes of a local cluster.
    :param scheduler: an existing scheduler's address (``None``: a local cluster).
    :param lookup: the cache: a point's result, if it has one.
    :param store: called with each new result (the cache's writer).
    :param progress: called with each result, and whether it came from the cache.
    """

    def __init__(
        self,
        workers: int,
        scheduler: str | None = None,
        lookup: Callable[[DensityPoint], PointResult | None] | None = None,
        store: Callable[[PointResult], None] | None = None,
        progress: Callable[[PointResult, bool], None] | None = None,
    ) -> None:
        self.workers = workers
        self.scheduler = scheduler
        self.lookup = lookup or (lambda _p: None)
        self.store = store or (lambda _r: None)
        self.progress = progress or (lambda _r, _c: None)
        self.cached = 0
        self.client: Any = None
        self.cluster: Any = None
        self._as_completed: Any = None
        self._point_of: dict[str, tuple[DensityPoint, int]] = {}

    def __enter__(self) -> Runner:
        try:
            from distributed import Client, LocalCluster, as_completed
        except ImportError as err:
            raise ConfigError(
                "density needs dask[distributed] (tools/sim/requirements.txt)"
            ) from err
        import logging
        import warnings

        # the cluster's own chatter (INFO lines, a busy dashboard port) is not the user's
        logging.getLogger("distributed").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
        self._as_completed = as_completed
        if self.scheduler is not None:
            try:
                self.client = Client(self.scheduler, timeout="10s")  # type: ignore[no-untyped-call]
            except (OSError, TimeoutError) as err:
                raise ConfigError(f"cannot reach the Dask scheduler at {self.scheduler}") from err
        else:
            import dask

            # no profiler on the workers: it would drop native engines on its thread
            with dask.config.set({"distributed.worker.profile.enabled": False}):
                self.cluster = LocalCluster(  # type: ignore[no-untyped-call]
                    n_workers=self.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                )
            self.client = Client(self.cluster)  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def run(self, batches: Iterable[Sequence[DensityPoint]],
            on_batch: Callable[[Sequence[PointResult]], Iterable[Sequence[DensityPoint]]]
            | None = None) -> None:
        """Run batches of points; when a batch is whole, ``on_batch`` gets its results
        (in the batch's order) and may return more batches to run."""
        ac = self._as_completed()
        pending: dict[int, tuple[Sequence[DensityPoint], dict[DensityPoint, PointResult]]] = {}
        ready: list[int] = []
        next_id = 0

        def submit(batch: Sequence[DensityPoint]) -> None:
            nonlocal next_id
            bid = next_id
            next_id += 1
            done: dict[DensityPoint, PointResult] = {}
            pending[bid] = (batch, done)
            for point in batch:
                hit = self.lookup(point)
                if hit is not None:
                    self.cached += 1
                    done[point] = hit
                    self.progress(hit, True)
                    continue
                future = self.client.submit(run_task, point, pure=False)
                self._point_of[future.key] = (point, bid)
                ac.add(future)
            if len(done) == len(batch):
                ready.append(bid)

        def finish(bid: int) -> None:
            batch, done = pending.pop(bid)
            if on_batch is not None:
                for more in on_batch([done[p] for p in batch]):
                    submit(more)

        for batch in batches:
            submit(batch)
        while ready or pending:
            while ready:
                finish(ready.pop(0))
            if not pending:
                break
            future = next(ac)
            point, bid = self._point_of.pop(future.key)
            try:
                result: PointResult = future.result()
            except UnicacheError as err:
                raise UnicacheError(f"density point {point.label}: {err}") from err
            except Exception as err:  # a bug: keep the worker's traceback, name the point
                err.add_note(f"density point: {point.label}")
                raise
            self.store(result)
            self.progress(result, False)
            batch, done = pending[bid]
            done[point] = result
            if len(done) == len(batch):
                ready.append(bid)


def run_density(req: DensityRequest, runner: Runner) -> DensityReport:
    """Run the experiment (module docstring) with ``runner``'s cluster and cache."""
    topo = check_request(req)
    cfg = from_topology(topo)
    seeds = tuple(range(1, req.seeds + 1))
    used = sorted({f for mix in req.mixes for f, _ in mix.weights})
    flavors = {name: req.catalogue.get(name) for name in used}
    judged = references_needed(tuple(flavors.values()))
    points: list[PointResult] = []

    def alone(stage: str, flavor: Flavor, seed: int, rates: tuple[tuple[str, float], ...],
              timing: DensityTiming) -> DensityPoint:
        return DensityPoint(stage, req.model, "alone", 1, "linux", seed, (flavor,), rates,
                            req.overcommit, timing)

    # 1. service time and batch throughput alone
    service: dict[str, list[PointOutcome]] = {}
    batch1 = [alone("service", f, s, (), req.timing) for f in judged for s in seeds]

    def took(
        into: dict[str, list[PointOutcome]],
    ) -> Callable[[Sequence[PointResult]], list[Sequence[DensityPoint]]]:
        def keep(results: Sequence[PointResult]) -> list[Sequence[DensityPoint]]:
            for r in results:
                points.append(r)
                into.setdefault(r.point.flavors[0].name, []).append(r.outcome)
            return []

        return keep

    runner.run([batch1], took(service))
    refs: dict[str, Reference] = {}
    for flavor in judged:
        tenants = [o.tenant(flavor.name) for o in service[flavor.name]]
        if flavor.slo is SloKind.LATENCY:
            means = [t.mean_us for t in tenants if t is not None and math.isfinite(t.mean_us)]
            if not means:
                raise UnicacheError(f"flavor {flavor.name}: no request completed alone")
            mean = sum(means) / len(means)
            refs[flavor.name] = Reference(flavor.name, mean, flavor.utilization / mean * 1e6)
        else:
            moved = [t.mb_per_s for t in tenants if t is not None]
            refs[flavor.name] = Reference(flavor.name, mb_per_s=sum(moved) / len(moved))
    rates = tuple(sorted((n, r.rate_hz) for n, r in refs.items() if r.rate_hz > 0))

    # 2. the latency flavors alone at their rate: the p95 of the SLO
    longer = replace(req.timing, measure_rounds=req.timing.measure_rounds * ALONE_MEASURE)
    alone_out: dict[str, list[PointOutcome]] = {}
    batch2 = [alone("alone", f, s, rates, longer) for f in judged if f.latency_critical
              for s in seeds]
    if batch2:
        runner.run([batch2], took(alone_out))
    for name, outs in alone_out.items():
        runs = [t.latencies_us for o in outs if (t := o.tenant(name)) is not None]
        refs[name] = replace(refs[name], p95_us=pooled_p95(runs))

    # 3. the searches, side by side
    searches: dict[tuple[str, str], DensitySearch] = {}
    probes: dict[tuple[str, str], list[Probe]] = {}
    caps: dict[tuple[str, str], int] = {}
    sequences: dict[str, tuple[Flavor, ...]] = {}
    for mix in req.mixes:
        sequences[mix.name] = tuple(flavors[f] for f in mix_vms(mix, MAX_VMS))
        for policy in req.policies:
            key = (mix.name, policy)
            cap = admission_cap(topo, sequences[mix.name], policy, req.overcommit)
            caps[key] = cap
            first = guess(sequences[mix.name], cfg.n_cpus, cap)
            searches[key] = DensitySearch(cap, first, req.tolerance)
            probes[key] = []

    def probe_batch(key: tuple[str, str]) -> list[Sequence[DensityPoint]]:
        n = searches[key].next_probe()
        if n is None:
            return []
        mix, policy = key
        return [[DensityPoint("search", req.model, mix, n, policy, s, sequences[mix][:n],
                              rates, req.overcommit, req.timing) for s in seeds]]

    def judged_probe(results: Sequence[PointResult]) -> list[Sequence[DensityPoint]]:
        points.extend(results)
        first = results[0].point
        key = (first.mix, first.policy)
        outcomes = tuple(r.outcome for r in results)
        admitted = all(o.admitted for o in outcomes)
        checks: tuple[SloCheck, ...] = ()
        if admitted:
            latencies: dict[str, list[tuple[float, ...]]] = {}
            throughputs: dict[str, list[float]] = {}
            for o in outcomes:
                for t in o.tenants:
                    latencies.setdefault(t.flavor, []).append(t.latencies_us)
                    throughputs.setdefault(t.flavor, []).append(t.mb_per_s)
            checks = check_point(req.catalogue, refs, latencies, throughputs)
        probe = Probe(first.n, checks, admitted, outcomes)
        probes[key].append(probe)
        searches[key].record(first.n, probe.ratio)
        return probe_batch(key)

    runner.run([b for key in searches for b in probe_batch(key)], judged_probe)
    results = tuple(
        SearchResult(mix, policy, caps[(mix.name, policy)],
                     searches[(mix.name, policy)].result, tuple(probes[(mix.name, policy)]))
        for mix in req.mixes
        for policy in req.policies
    )
    return DensityReport(
        req,
        tuple(refs[f.name] for f in judged),
        results,
        tuple(points),
        runner.cached,
    )


@cache
def _model(name: str) -> Topology:
    return load_model(name)
