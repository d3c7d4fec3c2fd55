"""The simulated host (Host port) and the guest shim, and the live loop they run."""

from __future__ import annotations

import pytest
from unicache.model import (
    BUDGET_UNLIMITED,
    ChunkId,
    CounterSource,
    PinVcpu,
    PlacementEntry,
    PlacementTable,
    PublishPlacement,
    VcpuId,
)
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.mfc.read import run_mfc
from unicache_sim.experiments.mfc.spec import MfcSpec
from unicache_sim.guest import shim as guest_shim
from unicache_sim.guest import shimrule
from unicache_sim.guest.shim import GuestShim
from unicache_sim.guest.shimcost import ShimCost
from unicache_sim.guest.simhost import SimHost

from tests.sim.freeshim import FREE_SHIM, SIZES
from tests.topologies import TOPO_CORE_I7_860, TOPO_OPTERON_16

CHUNK = 256 * 1024


def _host() -> tuple[SimHost, int, int]:
    cfg = from_topology(TOPO_OPTERON_16)
    engine = cfg.engine()
    host = SimHost(cfg, engine, "vm0", period_cycles=1e6)
    tid = engine.add_thread(0)
    host.add_thread(tid, 0)
    obj = engine.add_object(CHUNK)
    return host, tid, obj


def test_observe_reports_the_reads_and_counters_of_the_round() -> None:
    host, tid, obj = _host()
    shim = GuestShim(host)
    shim.read_chunk(tid, obj, ChunkId(7, 0), 0, CHUNK, 0.0, CHUNK)
    assert host.engine.run() == ("need", tid)
    obs = host.observe()
    assert obs is not None
    (report,) = obs.reports
    (access,) = report.chunks
    assert access.chunk == ChunkId(7, 0) and access.bytes_read == CHUNK and access.reads == 1
    assert access.vcpu_bytes == ((0, CHUNK),)
    # a sample for every vCPU, as the live host counts every vCPU thread; vCPU 0 read
    assert [s.vcpu.index for s in obs.samples] == list(range(host.cfg.n_cpus))
    sample = obs.samples[0]
    assert all(s.llc_references == 0 for s in obs.samples[1:])
    assert sample.source is CounterSource.SIMULATED
    assert sample.llc_misses == CHUNK // 64  # a cold read misses every line
    # the next round starts from zero
    again = host.observe()
    assert again is not None and again.reports[0].chunks == ()


def test_each_call_pays_the_shims_cost_for_what_the_table_says_and_its_size() -> None:
    # distinct figures per state, so a call charged as another state is caught
    cost = ShimCost("test", 2.0, SIZES, {"none": (1, 2, 3, 4, 5),
                                         "unplaced": (10, 20, 30, 40, 50),
                                         "placed": (100, 200, 300, 400, 500)})
    host, tid, obj = _host()
    shim = GuestShim(host, cost)

    def read(chunk: int, length: int) -> float:
        shim.read_chunk(tid, obj, ChunkId(7, chunk), 0, length, 0.0, CHUNK)
        assert host.engine.run() == ("need", tid)
        return host.engine.thread_stats(tid).compute_cycles

    paid = read(0, 4096)
    assert paid == pytest.approx(2 * 2.0)  # no table yet: 2 ns at 2 GHz
    table = PlacementTable("vm0", 1, CHUNK, CHUNK,
                           (PlacementEntry(ChunkId(7, 1), frozenset({0}), True, 0),))
    host.act([PublishPlacement("vm0", table, "test")])
    paid, before = read(0, 65536), paid
    assert paid - before == pytest.approx(40 * 2.0)  # a chunk the table does not name
    paid, before = read(1, 65536), paid
    assert paid - before == pytest.approx(400 * 2.0)  # a placed one
    assert cost.cycles("placed", 1 << 20) == pytest.approx(500 * 2.0)  # held beyond 256 KiB
    assert cost.cycles("unplaced", 8192) == pytest.approx(25 * 2.0)  # log2-interpolated


def test_pin_moves_the_vcpu_and_its_thread() -> None:
    host, tid, _ = _host()
    result = host.act([PinVcpu(VcpuId("vm0", 0), frozenset({8, 9}), 2, "test")])
    assert len(result.applied) == 1 and not result.failed
    assert host.engine.thread_cpu(tid) in (8, 9)
    assert host.engine.thread_stats(tid).migrations == 1


def test_actions_for_unknown_vcpus_fail_without_raising() -> None:
    host, _, _ = _host()
    result = host.act([PinVcpu(VcpuId("other", 0), frozenset({1}), 0, "test")])
    assert not result.applied and len(result.failed) == 1


def test_shim_migrates_to_the_published_vcpus_and_obeys_non_caching() -> None:
    host, tid, obj = _host()
    table = PlacementTable(
        "vm0",
        1,
        CHUNK,
        4096,
        (
            PlacementEntry(ChunkId(1, 0), frozenset({12}), True, 4, 3),
            PlacementEntry(ChunkId(2, 0), frozenset({0}), False, 0),
        ),
    )
    host.act([PublishPlacement("vm0", table, "test")])
    shim = GuestShim(host)
    shim.read_chunk(tid, obj, ChunkId(1, 0), 0, CHUNK, 0.0, CHUNK)
    assert host.engine.run() == ("need", tid)
    assert host.engine.thread_cpu(tid) == 12
    assert host.thread_vcpu[tid] == 12
    before = sum(host.engine.occupancy(level, 12) for level in range(2))
    cold = host.engine.add_object(CHUNK)
    shim.read_chunk(tid, cold, ChunkId(2, 0), 0, CHUNK, 0.0, CHUNK)
    assert host.engine.run() == ("need", tid)
    assert sum(host.engine.occupancy(level, 12) for level in range(2)) == before


def test_shim_runs_readers_of_one_unit_where_the_shims_rule_puts_them() -> None:
    host, first, obj = _host()
    second = host.engine.add_thread(1)
    host.add_thread(second, 1)
    unit = frozenset({4, 5, 6, 7})
    chunk = ChunkId(3, 0)
    table = PlacementTable(
        "vm0", 1, CHUNK, 4096, (PlacementEntry(chunk, unit, True, BUDGET_UNLIMITED, 1),)
    )
    host.act([PublishPlacement("vm0", table, "test")])
    shim = GuestShim(host)
    shim.read_chunk(first, obj, chunk, 0, CHUNK, 0.0, CHUNK)
    shim.read_chunk(second, obj, chunk, 0, CHUNK, 0.0, CHUNK)
    # uc_decide: the chunk's home vCPU for the first; it holds it (a live claim), so the
    # second goes to the next vCPU of the unit cyclically from home
    home = shimrule.home_vcpu(unit, chunk.file_id, chunk.index)
    following = list(shimrule.vcpus_from_home(shimrule.as_mask(unit), home))[1]
    assert host.thread_vcpu[first] == home
    assert host.thread_vcpu[second] == following
    assert set(shim.claims.snapshot()) == {home, following}


def test_shim_gives_a_pinned_thread_back_to_the_guests_scheduler_once_no_chunk_has_a_vcpu(
) -> None:
    # uc_unpin (tests/shim/test_shim_migration.py checks the C side): a withdrawn placement
    # must not leave the threads it moved piled on one chunk's home vCPU
    host, tid, obj = _host()
    chunk = ChunkId(1, 0)
    placed = PlacementTable(
        "vm0", 1, CHUNK, 4096, (PlacementEntry(chunk, frozenset({12}), True, BUDGET_UNLIMITED),)
    )
    host.act([PublishPlacement("vm0", placed, "test")])
    shim = GuestShim(host)
    shim.read_chunk(tid, obj, chunk, 0, CHUNK, 0.0, CHUNK)
    assert host.engine.run() == ("need", tid)
    assert host.thread_vcpu[tid] == 12
    # a table that still places another chunk: the thread stays where it is (still pinned)
    other = PlacementTable(
        "vm0", 2, CHUNK, 4096,
        (PlacementEntry(ChunkId(9, 0), frozenset({4}), True, BUDGET_UNLIMITED),),
    )
    host.act([PublishPlacement("vm0", other, "test")])
    shim.read_chunk(tid, obj, chunk, 0, CHUNK, 0.0, CHUNK)
    assert host.engine.run() == ("need", tid)
    assert host.thread_vcpu[tid] == 12
    # SRM's colors only, as a VM SCU leaves alone gets: no chunk has a vCPU
    colors_only = (PlacementEntry(chunk, frozenset(), color_node=0),)
    host.act([PublishPlacement("vm0", PlacementTable("vm0", 3, CHUNK, 4096, colors_only), "t")])
    shim.read_chunk(tid, obj, chunk, 0, CHUNK, 0.0, CHUNK)
    assert host.engine.run() == ("need", tid)
    assert host.thread_vcpu[tid] == 0 and host.engine.thread_cpu(tid) == 0
    # unpinned: an unplaced read no longer moves it
    shim.read_chunk(tid, obj, chunk, 0, CHUNK, 0.0, CHUNK)
    assert host.engine.run() == ("need", tid)
    assert host.engine.thread_stats(tid).migrations == 2


def test_live_loop_at_the_daemons_round_still_gains_at_8_mib() -> None:
    spec = MfcSpec(min_measure_bytes=48 * 1024 * 1024, measure_factor=2.0)
    (point,) = run_mfc(TOPO_OPTERON_16, spec, [8.0])
    assert point.speedup > 1.3
    assert point.get("unicache").dram_per_byte < 0.5 * point.get("linux").dram_per_byte


@pytest.mark.parametrize("corunner", ["none", "mergesort"])
def test_where_the_policy_has_nothing_to_do_unicache_measures_exactly_linux(
    corunner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one LLC group: OBS's cpuset is every CPU and SCU has nothing to unify; the host's
    # scheduler floats the vCPUs as Linux floats threads (and a co-runner VM's thread as
    # Linux floats it), and every baseline measures the same reads of the sequence, so
    # nothing but the policy (and the shim's cost, taken out here: it has a test of its
    # own) could tell the two apart
    monkeypatch.setattr(guest_shim, "SHIM_COST", FREE_SHIM)
    for seed in (1, 2):
        spec = MfcSpec(
            threads=2, min_measure_bytes=32 * 1024 * 1024, corunner=corunner, seed=seed
        )
        (point,) = run_mfc(TOPO_CORE_I7_860, spec, [16.0])
        assert point.get("unicache").migrations == point.get("linux").migrations
        assert point.speedup == 1.0, (seed, point.speedup)
