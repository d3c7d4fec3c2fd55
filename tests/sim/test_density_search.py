"""The density experiment's pure logic: SLO checks, the search for the largest N, the CDF."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from unicache_sim.density.mixes import mix_vms
from unicache_sim.density.search import (
    DensitySearch,
    Reference,
    cdf,
    check_point,
    check_slo,
    density_ratio,
    guess,
    percentile,
    pooled_p95,
    worst_ratio,
)
from unicache_sim.density.tenants import Mix, SloKind, load_catalogue


def test_percentiles_are_nearest_rank_and_seeds_pool() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.95) == 95.0 and percentile(values, 0.5) == 50.0
    assert math.isnan(percentile([], 0.95))
    assert pooled_p95([values[:50], values[50:]]) == 95.0


def test_latency_slo_is_k_times_the_p95_alone_and_throughput_a_floor() -> None:
    cat = load_catalogue()
    web = check_slo(cat.get("web"), Reference("web", p95_us=10.0), 19.0)
    assert web is not None and web.target == 20.0 and web.meets and web.ratio == 0.95
    slow = check_slo(cat.get("web"), Reference("web", p95_us=10.0), 21.0)
    assert slow is not None and not slow.meets
    build = check_slo(cat.get("build"), Reference("build", mb_per_s=1000.0), 400.0)
    assert build is not None and build.kind is SloKind.THROUGHPUT
    assert build.target == 500.0 and not build.meets and build.ratio == 1.25
    assert check_slo(cat.get("idle"), Reference("idle"), 0.0) is None
    # nothing measured fails, never passes
    nothing = check_slo(cat.get("web"), Reference("web", p95_us=10.0), math.nan)
    assert nothing is not None and not nothing.meets


def test_a_point_pools_its_seeds_before_judging() -> None:
    cat = load_catalogue()
    refs = {"web": Reference("web", p95_us=10.0), "build": Reference("build", mb_per_s=100.0)}
    fast = [5.0] * 96 + [50.0] * 4  # p95 of this seed alone: 5
    slow = [5.0] * 90 + [50.0] * 10  # p95 of this seed alone: 50
    checks = check_point(cat, refs, {"web": [fast, slow]}, {"build": [80.0, 40.0]})
    by = {c.flavor: c for c in checks}
    assert by["web"].measured == 50.0  # 14 of 200 above 5: the pooled p95 is 50
    assert by["build"].measured == 60.0 and by["build"].meets
    assert worst_ratio(checks) == 2.5 and worst_ratio(()) == 0.0


def _run(search: DensitySearch, ratio_at: Callable[[int], float]) -> int:
    probes = 0
    while (n := search.next_probe()) is not None:
        assert 1 <= n <= search.cap
        search.record(n, ratio_at(n))
        probes += 1
        assert probes < 100
    return probes


@pytest.mark.parametrize(
    ("boundary", "cap", "first"),
    [(37, 200, 50), (37, 200, 10), (199, 200, 50), (1, 200, 50), (120, 130, 130), (5, 6, 3)],
    ids=["below-guess", "above-guess", "just-under-cap", "one-vm", "guess-at-cap", "tiny"],
)
def test_the_search_finds_the_exact_boundary_of_a_monotone_slo(
    boundary: int, cap: int, first: int
) -> None:
    search = DensitySearch(cap, first)
    # a smooth SLO ratio that crosses 1 between boundary and boundary + 1
    probes = _run(search, lambda n: (n + 0.5) / (boundary + 0.5))
    assert search.result == boundary
    # fewer probes than bisection from scratch needs, and far fewer than a linear scan
    assert probes <= math.ceil(math.log2(cap)) + 3


def test_an_slo_that_breaks_off_a_cliff_is_found_at_bisections_pace() -> None:
    # flat, then a cliff: interpolation would creep up from below; the middle is taken
    search = DensitySearch(90, 90)
    probes = _run(search, lambda n: 0.6 + n / 1000 if n <= 86 else 2.2)
    assert search.result == 86 and probes <= 9


def test_the_search_stops_at_the_cap_when_every_slo_holds() -> None:
    search = DensitySearch(40, 30)
    assert _run(search, lambda n: 0.1) == 2  # the guess, then the cap
    assert search.result == 40


def test_the_search_returns_zero_when_one_vm_misses_its_slo() -> None:
    search = DensitySearch(40, 30)
    _run(search, lambda n: 3.0)
    assert search.result == 0 and search.probes[-1][0] == 1


def test_no_room_is_no_vm_and_no_probe() -> None:
    search = DensitySearch(0, 5)
    assert search.next_probe() is None and search.result == 0


def test_a_tolerance_stops_the_search_early_within_it() -> None:
    exact = DensitySearch(400, 100)
    loose = DensitySearch(400, 100, tolerance=0.05)
    def f(n: int) -> float:
        return n / 300.5
    assert _run(loose, f) < _run(exact, f)
    assert exact.result == 300 and 300 * 0.95 <= loose.result <= 300


def test_a_noisy_pass_above_a_fail_keeps_the_bracket_consistent() -> None:
    search = DensitySearch(100, 50)
    search.record(50, 1.2)
    search.record(30, 0.8)
    search.record(60, 0.9)  # noise: a pass above the fail
    assert search.lo < search.hi
    while (n := search.next_probe()) is not None:
        search.record(n, 0.5 if n <= 40 else 1.5)
    assert search.lo < search.hi and search.result >= 30


def test_the_guess_fills_the_cpus_with_the_mix_demand_alone() -> None:
    cat = load_catalogue()
    flavors = tuple(cat.get(f) for f in mix_vms(Mix("m", (("web", 1),)), 500))
    # a web VM keeps 2 x 0.4 = 0.8 CPUs busy: 160 fill 128 CPUs
    assert guess(flavors, 128, 500) == 160
    assert guess(flavors, 128, 100) == 100


def test_cdf_and_ratio() -> None:
    assert cdf([1.5, 1.0, math.nan, 2.0]) == ((1.0, 1 / 3), (1.5, 2 / 3), (2.0, 1.0))
    assert density_ratio(13, 10) == 1.3
    assert density_ratio(3, 0) == math.inf and math.isnan(density_ratio(0, 0))


def test_a_search_near_a_known_answer_decides_within_the_tolerance_in_two_probes() -> None:
    # another policy found 86; this one's boundary is 88: 86 passes, 86 + 4 fails
    search = DensitySearch(200, 86, tolerance=0.05, near=True)
    assert _run(search, lambda n: (n + 0.5) / 88.5) == 2
    assert search.probes == [(86, 86.5 / 88.5), (90, 90.5 / 88.5)]
    assert search.result == 86
    # the boundary just below: 86 fails, the lowest N whose pass ends it (82) passes
    below = DensitySearch(200, 86, tolerance=0.05, near=True)
    assert _run(below, lambda n: (n + 0.5) / 84.5) == 2
    assert below.result == 82 and 84 * 0.95 <= below.result <= 84


@pytest.mark.parametrize("boundary", [20, 60, 80, 95, 130, 199])
def test_a_search_near_another_answer_finds_a_far_boundary_too(boundary: int) -> None:
    search = DensitySearch(200, 86, tolerance=0.05, near=True)
    probes = _run(search, lambda n: (n + 0.5) / (boundary + 0.5))
    assert boundary * 0.95 <= search.result <= boundary
    assert probes <= 11


def test_a_narrow_bracket_is_closed_by_an_n_that_ends_the_search_either_way() -> None:
    search = DensitySearch(200, 100, tolerance=0.05)
    search.record(100, 0.9)
    search.record(110, 1.05)  # interpolation aims at 107: a fail there leaves 100..107
    assert search.next_probe() == 105  # a pass leaves 105..110, a fail 100..105: both done
    search.record(105, 1.02)
    assert search.done and search.result == 100
