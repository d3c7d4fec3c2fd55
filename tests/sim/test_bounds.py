"""Upper bounds on MFC §6.3's parallel set-up (unicache_sim.experiments.mfc.parallel_bound,
docs/simulator.md "The parallel set-up"): the CPU bound by hand, the queue bound below it
and rising with readers, and issue #11's 2.5x above both on the paper's machine."""

from __future__ import annotations

import pytest
from unicache.topology import Unify
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.mfc.parallel_bound import parallel_bound
from unicache_sim.experiments.mfc.read import run_baseline
from unicache_sim.experiments.mfc.spec import MIB, MfcSpec

from tests.topologies import TOPO_OPTERON_16


def test_the_cpu_bound_is_every_core_reading_at_l2_speed_and_moving() -> None:
    b = parallel_bound(TOPO_OPTERON_16, Unify.L2, 32)
    assert b.read_cycles == 262144 / 4.0  # the L2's 4 bytes a cycle
    # the next core is uniform: 3 of 16 in the chip (18,400), 12 of 16 across (23,400)
    assert b.move_cycles == pytest.approx((3 * 18_400 + 12 * 23_400) / 16)
    assert b.cpu_bound_gb_s == pytest.approx(16 * 262144 / (b.read_cycles + b.move_cycles) * 2)


@pytest.mark.parametrize("unify", [Unify.L2, Unify.LLC])
def test_readers_queueing_for_their_unit_stay_below_the_cpu_bound(unify: Unify) -> None:
    figures = [parallel_bound(TOPO_OPTERON_16, unify, n, reads=50_000) for n in (8, 16, 32, 64)]
    assert all(b.queue_bound_gb_s < b.cpu_bound_gb_s for b in figures)
    queue = [b.queue_bound_gb_s for b in figures]
    assert queue == sorted(queue)  # more readers keep more units busy


def test_the_parallel_set_ups_2_5x_is_above_what_unification_can_reach_on_opteron_16() -> None:
    # 32 readers under unicache against 16 under Linux, 8 MiB (issue #11's acceptance)
    spec = MfcSpec(threads=16, setup="parallel")
    topo = TOPO_OPTERON_16
    linux = run_baseline("linux", topo, from_topology(topo), spec, 8 * MIB).mb_per_s / 1e3
    for unify in (Unify.L2, Unify.LLC):
        b = parallel_bound(topo, unify, 32)
        assert b.queue_bound_gb_s < 2.5 * linux, (unify, b.queue_bound_gb_s, linux)
