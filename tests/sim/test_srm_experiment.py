"""The SRM §2 experiment in the simulator: SRM's page colors and their effect on mergesort.

The seed picks the page allocator's free frames, so every figure below is checked as the
median over :data:`SEEDS`, with a looser bound that no single seed may break (as
test_mfc_paper.py does): one seed's allocation decides no claim. Seed 5, for one, puts
grep's shared-LLC misses at 3x rather than the other seeds' 6-7x of the apart placement.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable

import pytest
from unicache.errors import ConfigError
from unicache.policy.srm.buffer import T_L, page_colors
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.srm.colors import SrmPoint, grep_cpu, run_sort, run_srm
from unicache_sim.experiments.srm.memory import KIB, SrmSpec, build_memory

from tests.topologies import TOPO_OPTERON_242_2NODE, TOPO_XEON_X5355

TOPO = TOPO_XEON_X5355
CFG = from_topology(TOPO)
#: a smaller tarball and measurement than the CLI's: the effect, not the figure
SPEC = SrmSpec(tarball_mb=32, measure_lines=800_000)
#: the page allocator's seeds every figure is taken over (median, and each one bounded)
SEEDS = range(1, 6)

#: seed -> array size (KiB) -> (spread, colored)
Points = dict[int, dict[int, tuple[SrmPoint, SrmPoint]]]


@pytest.fixture(scope="module")
def points() -> Points:
    out: Points = {}
    for seed in SEEDS:
        spec = SrmSpec(sizes_kb=(256, 1536), tarball_mb=32, measure_lines=800_000, seed=seed)
        out[seed] = {a.size_kb: (a, b) for a, b in run_srm(TOPO, spec)}
    return out


def _over_seeds(points: Points, value: Callable[[dict[int, tuple[SrmPoint, SrmPoint]]], float]
                ) -> list[float]:
    return [value(points[seed]) for seed in SEEDS]


def _frame_colors(size: int, coloring: bool, pages: int, seed: int
                  ) -> tuple[list[int], tuple[int, ...]]:
    spec = SrmSpec(tarball_mb=32, measure_lines=800_000, seed=seed)
    mem = build_memory(TOPO, CFG, spec, size, coloring)
    frames = [mem.engine.object_frame(mem.tarball, p) for p in range(pages)]
    assert all(f is not None for f in frames)
    return [f % mem.n_colors for f in frames if f is not None], mem.tar_colors


@pytest.mark.parametrize("seed", SEEDS)
def test_tarball_frames_have_the_colors_the_srm_policy_decided(seed: int) -> None:
    got, decided = _frame_colors(256 * KIB, True, 4 * T_L, seed)
    assert got == list(decided[: 4 * T_L])
    # §3.2 same-file heuristic: T_l consecutive pages per color, a new color after each run
    runs = [got[i * T_L : (i + 1) * T_L] for i in range(4)]
    assert all(len(set(r)) == 1 for r in runs)
    assert len({r[0] for r in runs}) == 4


@pytest.mark.parametrize("seed", SEEDS)
def test_without_coloring_tarball_frames_spread_over_every_color(seed: int) -> None:
    got, decided = _frame_colors(256 * KIB, False, 4 * T_L, seed)
    assert decided == ()
    assert page_colors(TOPO) == 64
    counts = Counter(got)
    assert len(counts) == 64
    assert max(counts.values()) < 4 * T_L / 64 * 2.5


@pytest.mark.parametrize("seed", SEEDS)
def test_mergesort_pages_follow_vm_color_round_robin_under_srm(seed: int) -> None:
    spec = SrmSpec(tarball_mb=32, measure_lines=800_000, seed=seed)
    mem = build_memory(TOPO, CFG, spec, 256 * KIB, True)
    frames = [mem.engine.object_frame(mem.src, p) for p in range(64)]
    assert [f % 64 for f in frames if f is not None] == list(range(64))


def test_grep_runs_on_the_llc_mate_or_another_llc() -> None:
    assert grep_cpu(CFG, 0, "alone") is None
    assert CFG.group_of(grep_cpu(CFG, 0, "shared") or 0) == CFG.group_of(0)
    assert CFG.group_of(grep_cpu(CFG, 0, "apart") or 0) != CFG.group_of(0)
    with pytest.raises(ConfigError, match="no CPU sharing"):
        grep_cpu(from_topology(TOPO_OPTERON_242_2NODE), 0, "shared")


def test_grep_on_the_shared_llc_slows_a_large_mergesort_without_coloring(
    points: Points,
) -> None:
    large = _over_seeds(points, lambda p: p[1536][0].slowdown_pct)
    small = _over_seeds(points, lambda p: p[256][0].slowdown_pct)
    misses = _over_seeds(points, lambda p: p[1536][0].get("shared").misses_per_m_instr
                         / p[1536][0].get("apart").misses_per_m_instr)
    assert statistics.median(large) > 50.0 and min(large) > 30.0, large
    assert statistics.median(small) < 10.0 and max(small) < 15.0, small
    assert statistics.median(misses) > 5.0 and min(misses) > 2.5, misses


def test_coloring_reduces_the_co_runners_slowdown_and_llc_misses(points: Points) -> None:
    slowdown = _over_seeds(points, lambda p: p[1536][1].slowdown_pct / p[1536][0].slowdown_pct)
    misses = _over_seeds(points, lambda p: p[1536][1].get("shared").misses_per_m_instr
                         / p[1536][0].get("shared").misses_per_m_instr)
    # §2: "the execution of grep is not affected" by coloring
    grep = _over_seeds(points, lambda p: p[1536][1].get("shared").grep_mb_per_s
                       / p[1536][0].get("shared").grep_mb_per_s)
    assert statistics.median(slowdown) < 1 / 3 and max(slowdown) < 1 / 2, slowdown
    assert statistics.median(misses) < 0.3 and max(misses) < 0.5, misses
    assert statistics.median(grep) >= 0.95 and min(grep) >= 0.9, grep


def test_coloring_of_grep_alone_helps_with_normal_vm_pages() -> None:
    seconds, misses = [], []
    for seed in SEEDS:
        spec = SrmSpec(tarball_mb=32, measure_lines=800_000, vm_pages="spread", seed=seed)
        spread = run_sort(TOPO, CFG, spec, 1536 * KIB, False, "shared")
        colored = run_sort(TOPO, CFG, spec, 1536 * KIB, True, "shared")
        seconds.append(colored.seconds / spread.seconds)
        misses.append(colored.misses_per_m_instr / spread.misses_per_m_instr)
    assert statistics.median(seconds) < 0.6 and max(seconds) < 0.75, seconds
    assert statistics.median(misses) < 0.5 and max(misses) < 0.65, misses


@pytest.mark.parametrize("seed", SEEDS)
def test_mergesort_alone_does_not_depend_on_grep_colors(seed: int) -> None:
    spec = SrmSpec(tarball_mb=32, measure_lines=400_000, vm_pages="spread", seed=seed)
    a = run_sort(TOPO, CFG, spec, 768 * KIB, False, "alone")
    b = run_sort(TOPO, CFG, spec, 768 * KIB, True, "alone")
    assert a.seconds == pytest.approx(b.seconds)
    assert a.grep_mb_per_s == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_where_coloring_would_cost_mergesort_srm_steps_aside_and_costs_nothing(
    points: Points, seed: int
) -> None:
    # issue #11: colors cost mergesort 3-4 % at 256-512 KiB, where spreading costs 0 %;
    # the product's step-aside predicts it from the counters and colors nothing, on every
    # page allocation
    spread, srm = points[seed][256]
    assert srm.aside and "uncolored" in srm.aside
    assert srm.runs == spread.runs
    assert points[seed][1536][1].aside == ""  # where colors pay, SRM colors
