"""The NCC §5 grep experiment in the simulator: replicas made by the NCC policy."""

from __future__ import annotations

import pytest
from unicache.errors import ConfigError
from unicache.policy.ncc import NCC_THRESHOLD
from unicache_sim.config import from_topology
from unicache_sim.experiments.ncc_replicas import (
    NccResult,
    NccSpec,
    run_config,
    run_ncc,
    tree_sizes,
)

from tests.topologies import TOPO_OPTERON_242_2NODE, TOPO_XEON_X5355

TOPO = TOPO_OPTERON_242_2NODE
CFG = from_topology(TOPO)
#: 6 greps per shell over an 8 MB tree of 80 files
SPEC = NccSpec(tree_mb=8.0, greps=12)


@pytest.fixture(scope="module")
def result() -> NccResult:
    return run_ncc(TOPO, SPEC)


def test_tree_has_the_requested_size_and_file_count() -> None:
    sizes = tree_sizes(NccSpec(tree_mb=40.0))
    assert len(sizes) == 400
    assert sum(sizes) == pytest.approx(40e6, rel=1e-3)
    assert min(sizes) >= 0.08 * 100_000 and max(sizes) <= 2.0 * 100_000


def test_first_touch_alone_gives_one_half_local_hits(result: NccResult) -> None:
    # the first shell reads every file first: all its pages live on node 0
    assert result.without.local_ratio == pytest.approx(0.5, abs=0.01)
    assert result.without.replicas_made == 0


def test_replicas_raise_local_hits_to_all_but_the_threshold_reads(result: NccResult) -> None:
    # the other shell reads each chunk remotely NCC_THRESHOLD times, then from its replica
    expected = 1 - NCC_THRESHOLD / SPEC.greps
    assert result.with_replicas.local_ratio == pytest.approx(expected, abs=0.005)
    assert result.with_replicas.local_ratio > result.without.local_ratio + 0.3
    assert result.with_replicas.replicas_made == len(tree_sizes(SPEC))
    assert result.with_replicas.dram_remote_lines < 0.5 * result.without.dram_remote_lines


def test_replicas_shorten_the_greps_after_the_first(result: NccResult) -> None:
    # the first grep of each shell reads exactly the same copies in both runs
    assert result.with_replicas.first_grep_s == pytest.approx(result.without.first_grep_s)
    assert result.with_replicas.avg_grep_s < 0.95 * result.without.avg_grep_s
    assert result.speedup > 1.05


def test_no_replica_before_the_threshold_and_none_used_at_it() -> None:
    one_each = run_config(TOPO, CFG, NccSpec(tree_mb=4.0, greps=2), True)
    assert one_each.replicas_made == 0
    assert one_each.local_ratio == pytest.approx(0.5, abs=0.01)
    # the second remote read makes the replica, which no later read uses
    two_each = run_config(TOPO, CFG, NccSpec(tree_mb=4.0, greps=4), True)
    assert two_each.replicas_made == len(tree_sizes(NccSpec(tree_mb=4.0)))
    assert two_each.local_ratio == pytest.approx(0.5, abs=0.01)


def test_more_shells_than_cpus_share_them() -> None:
    run = run_config(TOPO, CFG, NccSpec(tree_mb=4.0, greps=12, shells=4), True)
    # 3 greps per shell, two shells per node: the remote pair reads remotely twice each
    # until the first replica (counters are per node, shared by both remote shells)
    assert run.local_ratio > 0.75
    assert run.replicas_made > 0


def test_single_node_model_and_bad_parameters_are_refused() -> None:
    with pytest.raises(ConfigError, match="one NUMA node"):
        run_ncc(TOPO_XEON_X5355, SPEC)
    with pytest.raises(ConfigError, match="--greps"):
        NccSpec(greps=1, shells=2).check()
    with pytest.raises(ConfigError, match="--tree-mb"):
        NccSpec(tree_mb=0.01, file_kb=100).check()


def test_more_chunks_than_replica_capacity_evict_and_free_replicas() -> None:
    # 1200 one-chunk files: node 1 may hold 1024 replicas (NccParams default)
    spec = NccSpec(tree_mb=12.0, file_kb=10.0, greps=6)
    run = run_config(TOPO, CFG, spec, True)
    assert run.replicas_dropped > 0
    assert run.replicas_made - run.replicas_dropped <= 1024
    assert 0.5 < run.local_ratio < 1 - 2 / 6
