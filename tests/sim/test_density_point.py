"""One point of the density experiment on a small model: requests measured, the same arrivals
under both policies, the daemon's rounds under unicache, admission, and the Parquet cache."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from unicache_sim.density.mixes import mix_vms
from unicache_sim.density.point import DensityTiming, PointOutcome, PointSpec, run_point
from unicache_sim.density.point_setup import (
    admit_linux,
    linux_start_cpus,
    place_unicache,
    unicache_cap,
)
from unicache_sim.density.points import DensityPoint, PointResult
from unicache_sim.density.store import PointCache, point_key, read_points, write_points
from unicache_sim.density.tenants import Flavor, Mix, load_catalogue
from unicache_sim.engine.config import from_topology

from tests.topologies import TOPO_OPTERON_16

#: a short point: 4 intervals of 0.3 ms
TINY = DensityTiming(window_s=0.0003, warm_rounds=2, measure_rounds=2)
RATES = (("kv", 30_000.0), ("web", 10_000.0))


def _flavors(
    n: int, weights: tuple[tuple[str, int], ...] = (("kv", 1), ("web", 1))
) -> tuple[Flavor, ...]:
    cat = load_catalogue()
    return tuple(cat.get(f) for f in mix_vms(Mix("m", weights), n))


@pytest.fixture(scope="module")
def both() -> dict[str, PointOutcome]:
    flavors = _flavors(2)
    return {p: run_point(TOPO_OPTERON_16, PointSpec(flavors, p, 1, RATES, 2.0, TINY))
            for p in ("linux", "unicache")}


def test_requests_are_measured_and_arrive_alike_under_both_policies(
    both: dict[str, PointOutcome],
) -> None:
    linux, uc = both["linux"], both["unicache"]
    assert linux.admitted and uc.admitted
    for flavor in ("kv", "web"):
        a, b = linux.tenant(flavor), uc.tenant(flavor)
        assert a is not None and b is not None and a.vms == 1
        # the same Poisson arrivals in both (seeded by seed, VM and vCPU)
        assert a.requests == b.requests > 5
        assert math.isfinite(a.p95_us) and a.p50_us <= a.p95_us <= a.p99_us
        assert list(a.latencies_us) == sorted(a.latencies_us)
    # the daemon decides once per interval under unicache, never under linux
    assert uc.rounds == TINY.warm_rounds + TINY.measure_rounds and linux.rounds == 0


def test_a_point_is_the_same_when_run_again() -> None:
    spec = PointSpec(_flavors(2), "unicache", 3, RATES, 2.0, TINY)
    assert repr(run_point(TOPO_OPTERON_16, spec)) == repr(run_point(TOPO_OPTERON_16, spec))


def test_batch_tenants_report_throughput_and_idle_ones_nothing() -> None:
    flavors = _flavors(2, (("build", 1), ("idle", 1)))
    out = run_point(TOPO_OPTERON_16, PointSpec(flavors, "linux", 1, (), 2.0, TINY))
    build, idle = out.tenant("build"), out.tenant("idle")
    assert build is not None and build.mb_per_s > 0 and build.requests == 0
    assert idle is not None and idle.mb_per_s == 0


def test_a_host_that_cannot_admit_the_vms_runs_nothing() -> None:
    flavors = _flavors(40)
    for policy in ("linux", "unicache"):
        out = run_point(TOPO_OPTERON_16, PointSpec(flavors, policy, 1, RATES, 1.0, TINY))
        assert not out.admitted and out.refused and out.tenants == ()
    assert "vCPU slots" in admit_linux(TOPO_OPTERON_16, flavors, 1.0) or "MiB" in admit_linux(
        TOPO_OPTERON_16, flavors, 1.0
    )


def test_unicache_cap_is_the_largest_prefix_place_unicache_admits() -> None:
    # one pass to the first refusal gives what asking every prefix gives
    for weights in ((("kv", 1), ("web", 1)), (("analytics", 2), ("stream", 1), ("idle", 1))):
        flavors = _flavors(24, weights)
        for overcommit in (1.0, 2.0):
            cap = unicache_cap(TOPO_OPTERON_16, flavors, overcommit)
            admitted = [not place_unicache(TOPO_OPTERON_16, flavors[:n], overcommit)[1]
                        for n in range(len(flavors) + 1)]
            assert admitted == [n <= cap for n in range(len(flavors) + 1)]
            assert 0 < cap < len(flavors)


def test_linux_starts_vcpus_spread_and_unicache_pins_them_to_llc_groups() -> None:
    cfg = from_topology(TOPO_OPTERON_16)
    flavors = _flavors(2)  # kv (4 vCPUs), web (2)
    starts = linux_start_cpus(cfg, flavors)
    cpus = [c for s in starts for c in s.values()]
    assert len(set(cpus)) == 6  # one vCPU per CPU
    assert len({cfg.group_of(c) for c in starts[0].values()}) == 4  # over every LLC group
    placed, refused = place_unicache(TOPO_OPTERON_16, flavors, 2.0)
    assert not refused
    affinity, nodes = placed[0]
    assert all(len({cfg.group_of(c) for c in s}) == 1 for s in affinity.values())
    assert set(nodes) == set(affinity)


def test_the_cache_gives_back_a_point_bit_for_bit_and_only_to_its_build(tmp_path: Path) -> None:
    flavors = _flavors(2)
    point = DensityPoint("search", "opteron-16", "m", 2, "linux", 1, flavors, RATES, 2.0, TINY)
    result = PointResult(point, run_point(TOPO_OPTERON_16, point.spec()))
    cache = PointCache(tmp_path / "cache", "build-a")
    assert cache.lookup(point) is None
    cache.store(result)
    back = cache.lookup(point)
    assert back is not None and repr(back) == repr(result)
    assert PointCache(tmp_path / "cache", "build-b").lookup(point) is None
    assert point_key(point, "a") != point_key(point, "b")
    write_points(tmp_path / "points.parquet", [result], "build-a")
    rows = read_points(tmp_path / "points.parquet")
    assert {r["flavor"] for r in rows} == {"kv", "web"}
    # every parameter of the point is a column
    for column in ("model", "mix", "n", "policy", "seed", "overcommit", "window_s",
                   "warm_rounds", "measure_rounds", "rates", "flavor_defs", "vm_flavors",
                   "build", "p95_us", "latencies_us"):
        assert column in rows[0]
    assert rows[0]["vm_flavors"] == "kv,web" and rows[0]["n"] == 2
