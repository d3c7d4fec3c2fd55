"""The density experiment's pure logic: SLO checks, the search for the largest N, the CDF.

Nothing here runs the simulator: the checks take measured latencies and throughputs, the
search takes verdicts and proposes the next N, so both are unit-tested on numbers.

**SLOs** (issue #16): a latency tenant meets its SLO when the p95 of its requests is at
most ``k`` times its *reference*, the p95 of one VM of the flavor alone on the same host
under the Linux baseline; a batch tenant when its throughput per VM is at least ``floor``
times its throughput alone. The reference is the same for both policies: "at the same
SLO" means the same target in microseconds.

**The search** (:class:`DensitySearch`) finds the largest N at which every tenant with an
SLO meets it, between 0 (nothing to meet) and the host's admission cap:

1. probe the *guess* (the N at which the mix's CPU demand alone would fill the host);
2. gallop: while every probe passed, go up by ``GROW`` (to the cap); while every probe
   failed, go down by the same factor (to 1);
3. then narrow the bracket (largest pass, smallest fail) by *safeguarded interpolation*:
   the N where the worst SLO ratio, interpolated linearly between the bracket's two
   probes, reaches 1, when that falls inside the bracket's middle half, else its middle
   (bisection: an SLO that holds and then breaks off a cliff never slows the search
   below bisection's pace), rounded to an integer strictly inside;
4. stop when the bracket is at most ``max(1, tolerance x lo)`` wide: the answer is lo.
   Once an N inside the bracket would end the search whether it passes or fails (the
   bracket is within about twice the tolerance), the probe is the one of those N nearest
   step 3's.

A search may start *near* an answer already known, another policy's on the same mix
(``near=True``): it probes that N first, then steps away from it while every probe
gives the same verdict, by one tolerance, then two, then four (``NEAR_STEPS``; down, the
first step is to the lowest N whose pass would end the search); after that it gallops
and narrows as above. When the two answers lie within the tolerance, two probes decide
it; one 30 % or more away costs about two probes more than a search from the guess.

It assumes what bisection assumes: more VMs never make the worst SLO better. Sampling
noise can break that near the boundary; the search then returns one boundary, and the
report shows every probe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from unicache_sim.density.tenants import Catalogue, Flavor, Kind, SloKind

#: the gallop's factor
GROW = 1.5
#: the share of the host's CPUs the guess fills with the mix's demand alone
GUESS_FILL = 1.0
#: steps a search near a known answer takes from it before it gallops
NEAR_STEPS = 3


@dataclass(frozen=True, slots=True)
class Reference:
    """A flavor alone on the host (the Linux baseline): what its SLO is relative to.

    :param flavor: the flavor.
    :param service_us: mean request service time, back to back (latency tenants).
    :param rate_hz: requests per second per vCPU: ``utilization / service``.
    :param p95_us: p95 latency alone at that rate (latency tenants).
    :param mb_per_s: throughput alone per VM (batch tenants).
    """

    flavor: str
    service_us: float = math.nan
    rate_hz: float = 0.0
    p95_us: float = math.nan
    mb_per_s: float = math.nan


@dataclass(frozen=True, slots=True)
class SloCheck:
    """One tenant's SLO at one point.

    :param flavor: the tenant's flavor.
    :param kind: latency or throughput.
    :param measured: p95 (us) or MB/s per VM.
    :param target: the bound: k x the reference's p95, or floor x its throughput.
    :param ratio: how close: measured / target for latency, target / measured for
        throughput; at most 1 meets the SLO.
    """

    flavor: str
    kind: SloKind
    measured: float
    target: float
    ratio: float

    @property
    def meets(self) -> bool:
        """Whether the SLO holds."""
        return self.ratio <= 1.0


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (nan when empty)."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def pooled_p95(runs: Sequence[Sequence[float]]) -> float:
    """The p95 over the requests of several runs (seeds) together."""
    return percentile(sorted(v for run in runs for v in run), 0.95)


def check_slo(flavor: Flavor, reference: Reference, measured: float) -> SloCheck | None:
    """The SLO check of one flavor (``None``: it has no SLO).

    :param measured: its p95 (us, latency tenants) or MB/s per VM (batch tenants); nan
        (nothing measured, e.g. no request arrived) fails.
    """
    if flavor.slo is SloKind.LATENCY:
        target = flavor.k * reference.p95_us
        ratio = measured / target if math.isfinite(measured) else math.inf
    elif flavor.slo is SloKind.THROUGHPUT:
        target = flavor.floor * reference.mb_per_s
        ratio = target / measured if measured > 0 and math.isfinite(measured) else math.inf
    else:
        return None
    return SloCheck(flavor.name, flavor.slo, measured, target, ratio)


def worst_ratio(checks: Sequence[SloCheck]) -> float:
    """The highest ratio of the checks (0 with none): at most 1 when all SLOs hold."""
    return max((c.ratio for c in checks), default=0.0)


def cpu_demand(flavor: Flavor) -> float:
    """CPUs one VM of the flavor keeps busy alone: utilization per vCPU for latency
    tenants, every vCPU for batch ones, none for idle ones."""
    if flavor.workload.kind is Kind.IDLE:
        return 0.0
    if flavor.slo is SloKind.LATENCY:
        return flavor.vcpus * flavor.utilization
    return float(flavor.vcpus)


def guess(flavors: Sequence[Flavor], n_cpus: int, cap: int) -> int:
    """The N at which the first N VMs' CPU demand alone reaches ``GUESS_FILL`` of the
    host's CPUs (at most ``cap``, at least 1).

    :param flavors: the mix's VMs in arrival order (at least ``cap`` of them).
    """
    demand = 0.0
    for n, flavor in enumerate(flavors[:cap], 1):
        demand += cpu_demand(flavor)
        if demand >= GUESS_FILL * n_cpus - 1e-9:
            return n
    return max(1, cap)


class DensitySearch:
    """The largest N meeting every SLO, between 0 and ``cap`` (module docstring).

    :param cap: the most VMs the host admits (0: none; the answer is 0).
    :param first: the first N to probe (:func:`guess`).
    :param tolerance: stop when the bracket is at most this share of its lower end wide
        (0: exact, to one VM).
    :param near: ``first`` is an answer already known (another policy's): the second probe
        steps one tolerance from it (module docstring).
    """

    def __init__(self, cap: int, first: int, tolerance: float = 0.0, near: bool = False) -> None:
        self.cap = max(0, cap)
        self.first = min(max(1, first), max(1, self.cap))
        self.tolerance = tolerance
        self.near = near
        #: the largest N that met every SLO (0: none yet)
        self.lo = 0
        #: the smallest N that did not (cap + 1: none yet)
        self.hi = self.cap + 1
        #: N -> the worst SLO ratio measured there
        self.ratios: dict[int, float] = {}
        #: the probes in order: (N, worst ratio)
        self.probes: list[tuple[int, float]] = []

    @property
    def done(self) -> bool:
        """Whether the bracket is narrow enough."""
        return self.hi - self.lo <= self._width(self.lo)

    def _width(self, lo: int) -> int:
        """The widest bracket above ``lo`` that ends the search."""
        return max(1, math.floor(self.tolerance * lo))

    @property
    def result(self) -> int:
        """The largest N known to meet every SLO (final once :attr:`done`)."""
        return self.lo

    def next_probe(self) -> int | None:
        """The next N to measure (``None``: done)."""
        if self.done:
            return None
        if not self.probes:
            return self.first
        passed = [n for n, r in self.probes if r <= 1.0]
        failed = [n for n, r in self.probes if r > 1.0]
        if self.near and not (passed and failed) and len(self.probes) <= NEAR_STEPS:
            return self._near_step(len(self.probes))
        if not failed:  # gallop up
            return min(self.cap, max(self.lo + 1, math.ceil(self.lo * GROW)))
        if not passed:  # gallop down
            return max(1, min(self.hi - 1, math.floor(self.hi / GROW)))
        return self._interpolated()

    def record(self, n: int, ratio: float) -> None:
        """What the probe at N measured: the worst SLO ratio (at most 1: all met)."""
        self.ratios[n] = ratio
        self.probes.append((n, ratio))
        if ratio <= 1.0:
            self.lo = max(self.lo, n)
        else:
            self.hi = min(self.hi, n)
        if self.lo >= self.hi:  # noise: a pass above a fail; trust the latest
            if ratio <= 1.0:
                self.hi = min((m for m, r in self.ratios.items() if r > 1.0 and m > n),
                              default=self.cap + 1)
            else:
                self.lo = max((m for m, r in self.ratios.items() if r <= 1.0 and m < n),
                              default=0)

    def _near_step(self, probes: int) -> int:
        # steps of one tolerance, doubling, away from the answer known (probes <= NEAR_STEPS)
        step = self._width(self.first) << (probes - 1)
        if self.lo > 0:  # every probe passed: up (if the first step fails, it is done)
            return min(self.cap, self.lo + step)
        # every probe failed: down, the first step to the lowest N whose pass ends it
        lowest = self.hi - 1
        while lowest > 1 and self.hi - (lowest - 1) <= self._width(lowest - 1):
            lowest -= 1
        return max(1, min(lowest, self.hi - step))

    def _interpolated(self) -> int:
        lo, hi = self.lo, self.hi
        mid = (lo + hi) / 2
        target = mid
        r_lo = self.ratios.get(lo)
        r_hi = self.ratios.get(hi)
        if r_lo is not None and r_hi is not None and math.isfinite(r_hi) and r_hi > r_lo:
            target = lo + (1.0 - r_lo) / (r_hi - r_lo) * (hi - lo)
        quarter = (hi - lo) / 4
        if not lo + quarter <= target <= hi - quarter:
            target = mid
        # an N that ends the search whatever it measures, if there is one
        final = [
            n for n in range(lo + 1, hi)
            if n - lo <= self._width(lo) and hi - n <= self._width(n)
        ]
        if final:
            return min(final, key=lambda n: (abs(n - target), n))
        n = round(target)
        return min(max(n, lo + 1), hi - 1)


def cdf(values: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """The empirical CDF: (value, share of values at most it), values ascending."""
    ordered = sorted(v for v in values if math.isfinite(v))
    n = len(ordered)
    return tuple((v, (i + 1) / n) for i, v in enumerate(ordered))


def density_ratio(unicache: int, linux: int) -> float:
    """unicache's VMs per host over Linux's (inf when Linux holds none and unicache
    some; nan when neither holds any)."""
    if linux > 0:
        return unicache / linux
    return math.inf if unicache > 0 else math.nan


def flavors_used(catalogue: Catalogue, names: Sequence[str]) -> tuple[Flavor, ...]:
    """The catalogue's flavors named, once each, in name order."""
    return tuple(catalogue.get(n) for n in sorted(set(names)))


def references_needed(flavors: Sequence[Flavor]) -> tuple[Flavor, ...]:
    """The flavors whose SLO needs a reference run alone."""
    return tuple(f for f in flavors if f.slo is not SloKind.NONE)


def check_point(
    catalogue: Catalogue,
    references: Mapping[str, Reference],
    latencies: Mapping[str, Sequence[Sequence[float]]],
    throughputs: Mapping[str, Sequence[float]],
) -> tuple[SloCheck, ...]:
    """Every SLO of one N, the seeds pooled.

    :param latencies: flavor -> per seed, its sorted request latencies (us).
    :param throughputs: flavor -> per seed, its MB/s per VM (the mean over seeds counts).
    """
    checks = []
    for name in sorted(set(latencies) | set(throughputs)):
        flavor = catalogue.get(name)
        ref = references.get(name, Reference(name))
        if flavor.slo is SloKind.LATENCY:
            measured = pooled_p95(latencies.get(name, ()))
        else:
            runs = [t for t in throughputs.get(name, ()) if math.isfinite(t)]
            measured = sum(runs) / len(runs) if runs else math.nan
        check = check_slo(flavor, ref, measured)
        if check is not None:
            checks.append(check)
    return tuple(checks)
