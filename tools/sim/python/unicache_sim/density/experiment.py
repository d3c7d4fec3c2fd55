"""The density experiment: references alone, then a search per mix and policy, on Dask.

One *point* is (mix, N, policy, seed); its task runs
:func:`unicache_sim.density.point.run_point` and returns a small frozen
:class:`PointResult`. The experiment (:func:`run_density`) has three stages:

1. **service**: one VM of each flavor alone under Linux, requests back to back, per seed:
   a latency flavor's mean service time gives its request rate
   (``utilization / service``, the same for every point), a batch flavor's throughput
   alone is its reference;
2. **alone**: one VM of each latency flavor alone under Linux at that rate, per seed, for
   ``ALONE_MEASURE`` times as long as a point: the p95 its SLO is relative to;
3. **search**: for every mix and policy a :class:`~unicache_sim.density.search.DensitySearch`
   proposes N; the seeds of one N run as tasks at once, their requests pooled for the
   verdict; the mixes run side by side, a mix's policies one after the other, each
   starting near the answer of the policy before (``near``).

Points run on a ``dask.distributed`` cluster: a ``LocalCluster`` of one-threaded worker
processes (default: this machine's CPUs), or the scheduler at ``--scheduler``. A point's
result depends on its parameters only (every draw is seeded by them), so it is the same
bit for bit wherever it runs. Finished points are kept in a cache
(:mod:`unicache_sim.density.store`), so a rerun runs only what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

from unicache.errors import ConfigError, UnicacheError
from unicache.topology import Topology
from unicache.topology.toml import load_model, model_names

from unicache_sim.density.mixes import mix_vms
from unicache_sim.density.point import POLICIES, DensityTiming, PointOutcome
from unicache_sim.density.point_setup import admit_linux, unicache_cap
from unicache_sim.density.points import DensityPoint, PointResult, Runner
from unicache_sim.density.search import (
    DensitySearch,
    Reference,
    SloCheck,
    check_point,
    guess,
    pooled_p95,
    references_needed,
    worst_ratio,
)
from unicache_sim.density.tenants import Catalogue, Flavor, Mix, SloKind
from unicache_sim.engine.config import from_topology

#: the alone runs measure this many times as many intervals as a point (a reference's
#: p95 from one VM's requests needs more of them than a host full of VMs gives)
ALONE_MEASURE = 6
#: the most VMs a search considers (a bound on the admission cap)
MAX_VMS = 1024
#: stages of a point
STAGES = ("service", "alone", "search")


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
    if policy != "linux":
        return unicache_cap(topo, flavors, overcommit)
    lo, hi = 0, len(flavors)  # the answer is in [lo, hi]; lo admitted
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if admit_linux(topo, flavors[:mid], overcommit):
            hi = mid - 1
        else:
            lo = mid
    return lo


def measure_references(req: DensityRequest, runner: Runner,
                       points: list[PointResult]) -> dict[str, Reference]:
    """Stages 1 and 2 (module docstring): every flavor of the mixes alone under Linux,
    its service time and rate, then its p95 alone at that rate (batch flavors: their
    throughput alone); the points run are appended to ``points``."""
    seeds = tuple(range(1, req.seeds + 1))
    used = sorted({f for mix in req.mixes for f, _ in mix.weights})
    judged = references_needed(tuple(req.catalogue.get(name) for name in used))

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
    rates = rates_of(refs)

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
    return {f.name: refs[f.name] for f in judged}


def rates_of(refs: Mapping[str, Reference]) -> tuple[tuple[str, float], ...]:
    """(flavor, requests per second per vCPU) of the latency flavors, by name."""
    return tuple(sorted((n, r.rate_hz) for n, r in refs.items() if r.rate_hz > 0))


def run_density(req: DensityRequest, runner: Runner) -> DensityReport:
    """Run the experiment (module docstring) with ``runner``'s cluster and cache."""
    topo = check_request(req)
    cfg = from_topology(topo)
    seeds = tuple(range(1, req.seeds + 1))
    used = sorted({f for mix in req.mixes for f, _ in mix.weights})
    flavors = {name: req.catalogue.get(name) for name in used}
    points: list[PointResult] = []
    refs = measure_references(req, runner, points)  # the judged flavors, in order
    rates = rates_of(refs)

    # 3. the searches: the mixes side by side, each mix's policies one after the other,
    # a policy's search starting near the answer of the one before
    searches: dict[tuple[str, str], DensitySearch] = {}
    probes: dict[tuple[str, str], list[Probe]] = {}
    caps: dict[tuple[str, str], int] = {}
    sequences: dict[str, tuple[Flavor, ...]] = {}
    for mix in req.mixes:
        sequences[mix.name] = tuple(flavors[f] for f in mix_vms(mix, MAX_VMS))
        for policy in req.policies:
            key = (mix.name, policy)
            caps[key] = admission_cap(topo, sequences[mix.name], policy, req.overcommit)
            probes[key] = []
        first = req.policies[0]
        guessed = guess(sequences[mix.name], cfg.n_cpus, caps[(mix.name, first)])
        searches[(mix.name, first)] = DensitySearch(
            caps[(mix.name, first)], guessed, req.tolerance
        )

    def probe_batch(key: tuple[str, str]) -> list[Sequence[DensityPoint]]:
        mix, policy = key
        n = searches[key].next_probe()
        if n is None:
            later = req.policies.index(policy) + 1
            if later == len(req.policies):
                return []
            after = (mix, req.policies[later])
            searches[after] = DensitySearch(
                caps[after], searches[key].result, req.tolerance, near=True
            )
            return probe_batch(after)
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

    runner.run([b for key in list(searches) for b in probe_batch(key)], judged_probe)
    results = tuple(
        SearchResult(mix, policy, caps[(mix.name, policy)],
                     searches[(mix.name, policy)].result, tuple(probes[(mix.name, policy)]))
        for mix in req.mixes
        for policy in req.policies
    )
    return DensityReport(
        req,
        tuple(refs.values()),
        results,
        tuple(points),
        runner.cached,
    )


@cache
def _model(name: str) -> Topology:
    return load_model(name)
