"""Cross-validation against a peer simulator: pycachesim (used only as a test oracle).

The same single-core multi-level LRU hierarchy (non-inclusive non-exclusive, pycachesim's
own semantics) fed the same address trace must give identical hit and miss counts at every
level, on randomized geometries (power-of-two and other set counts) and traces.
"""

from __future__ import annotations

import random

import cachesim  # pycachesim: listed in tools/sim/requirements.txt, a test oracle only
import pytest
import unicache_sim as us


def _peer(sizes: tuple[tuple[int, int], ...], line: int) -> tuple[object, list[object]]:
    mem = cachesim.MainMemory()
    caches: list[object] = []
    below = None
    for i in reversed(range(len(sizes))):
        sets, ways = sizes[i]
        if below is None:
            cache = cachesim.Cache(f"L{i + 1}", sets, ways, line, "LRU")
            mem.load_to(cache)
            mem.store_from(cache)
        else:
            cache = cachesim.Cache(
                f"L{i + 1}", sets, ways, line, "LRU", store_to=below, load_from=below
            )
        caches.insert(0, cache)
        below = cache
    return cachesim.CacheSimulator(caches[0], mem), caches


def _random_case(seed: int) -> tuple[tuple[tuple[int, int], ...], int, list[int]]:
    rng = random.Random(seed)
    n_levels = rng.randint(1, 3)
    sizes = []
    sets = rng.choice([1, 2, 3, 4, 5, 8, 16])
    for _ in range(n_levels):
        sizes.append((sets, rng.choice([1, 2, 3, 4, 8, 12, 16, 20, 32])))
        sets *= rng.choice([1, 2, 3, 4])
    line = rng.choice([32, 64, 128])
    capacity = sum(s * w for s, w in sizes)
    span = rng.randint(max(2, capacity // 2), capacity * 4)
    trace: list[int] = []
    while len(trace) < 6000:
        if rng.random() < 0.5:  # a sequential run, as a file read makes
            start = rng.randrange(span)
            trace.extend(range(start, start + rng.randint(1, 64)))
        else:
            trace.append(rng.randrange(span))
    return tuple(sizes), line, trace


@pytest.mark.parametrize("seed", range(12), ids=lambda s: f"random-config-{s}")
def test_miss_counts_equal_pycachesim_on_random_hierarchies(seed: int) -> None:
    sizes, line, trace = _random_case(seed)
    sim, caches = _peer(sizes, line)
    sim.load([t * line for t in trace])  # type: ignore[attr-defined]
    peer_hits = [c.HIT_count for c in caches]  # type: ignore[attr-defined]
    peer_misses = [c.MISS_count for c in caches]  # type: ignore[attr-defined]

    engine = us.single_core(sizes, line_size=line).engine()
    engine.run_trace(us.Trace(trace))
    served = engine.counters().served
    n = len(sizes)
    ours_hits = served[:n]
    ours_misses = [sum(served[i + 1 : n]) + served[-2] + served[-1] for i in range(n)]
    assert ours_hits == peer_hits, f"sizes={sizes} line={line}"
    assert ours_misses == peer_misses, f"sizes={sizes} line={line}"


@pytest.mark.parametrize("ways", [8, 16, 32], ids=lambda w: f"{w}-way")
def test_miss_counts_equal_pycachesim_on_the_specialised_way_counts(ways: int) -> None:
    # 8, 16 and 32 ways take the engine's vectorised set search (core/src/simd/): every
    # level of these hierarchies has that many ways, shared L3 slices included
    rng = random.Random(ways)
    sizes = ((4, ways), (16, ways), (64, ways))
    capacity = sum(s * w for s, w in sizes)
    trace: list[int] = []
    while len(trace) < 20_000:
        start = rng.randrange(capacity * 3)
        trace.extend(range(start, start + rng.randint(1, 96)))
    sim, caches = _peer(sizes, 64)
    sim.load([t * 64 for t in trace])  # type: ignore[attr-defined]
    engine = us.single_core(sizes, line_size=64).engine()
    engine.run_trace(us.Trace(trace))
    served = engine.counters().served
    assert list(served[:3]) == [c.HIT_count for c in caches]  # type: ignore[attr-defined]
    assert all(hits > 100 for hits in served[:3])  # real hits at every level were compared


def test_peer_comparison_detects_a_different_geometry() -> None:
    # guard against a vacuous comparison: a different associativity must change the counts
    sizes, line, trace = ((8, 2), (32, 4)), 64, _random_case(99)[2]
    sim, caches = _peer(sizes, line)
    sim.load([t * line for t in trace])  # type: ignore[attr-defined]
    engine = us.single_core(((8, 1), (32, 4)), line_size=line).engine()
    engine.run_trace(us.Trace(trace))
    assert engine.counters().served[0] != caches[0].HIT_count  # type: ignore[attr-defined]
