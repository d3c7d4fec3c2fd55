"""Other users of the caches (MFC §4.6): ``Engine.touch`` and ``MfcSpec.background_bytes``."""

from __future__ import annotations

import pytest
from unicache.errors import UnicacheError
from unicache_sim.engine.config import from_topology
from unicache_sim.experiments.mfc.read import run_baseline
from unicache_sim.experiments.mfc.spec import MIB, MfcSpec

from tests.topologies import TOPO_OPTERON_16


def test_touch_fills_the_cpus_caches_without_charging_any_thread() -> None:
    cfg = from_topology(TOPO_OPTERON_16)
    engine = cfg.engine()
    tid = engine.add_thread(0)
    obj = engine.add_object(64 * 1024, "node", 0)
    engine.touch(0, obj, 0, 64 * 1024, "read", 0.0)
    lines = 64 * 1024 // cfg.line_size
    assert sum(engine.counters().served) == lines
    # 64 KiB stay in cpu 0's private L1 and L2 (random frames: some L1 sets overflow)
    assert engine.occupancy(0, 0) + engine.occupancy(1, 0) == lines
    assert engine.occupancy(0, 1) == 0
    stats = engine.thread_stats(tid)
    assert stats.lines == 0 and stats.stall_cycles == 0.0
    # touched again: every line is served by cpu 0's own L1 or L2
    before = engine.counters().served
    engine.touch(0, obj, 0, 64 * 1024)
    after = engine.counters().served
    assert (after[0] - before[0]) + (after[1] - before[1]) == lines


def test_touch_outside_the_object_is_one_clear_error() -> None:
    engine = from_topology(TOPO_OPTERON_16).engine()
    obj = engine.add_object(4096)
    with pytest.raises(UnicacheError, match="outside object"):
        engine.touch(0, obj, 0, 8192)
    with pytest.raises(UnicacheError):
        engine.touch(99, obj, 0, 64)


@pytest.mark.parametrize("baseline", ["linux", "unicache", "oracle"])
def test_background_footprint_competes_with_the_files_in_every_baseline(baseline: str) -> None:
    topo = TOPO_OPTERON_16
    cfg = from_topology(topo)
    small = MfcSpec(min_warm_bytes=16 * MIB, min_measure_bytes=16 * MIB, warm_factor=1.0)
    busy = MfcSpec(
        min_warm_bytes=16 * MIB,
        min_measure_bytes=16 * MIB,
        warm_factor=1.0,
        background_bytes=512 * 1024,
        background_period_s=0.002,
    )
    quiet = run_baseline(baseline, topo, cfg, small, 16 * MIB)
    crowded = run_baseline(baseline, topo, cfg, busy, 16 * MIB)
    assert crowded.dram_per_byte > quiet.dram_per_byte
    assert crowded.mb_per_s < quiet.mb_per_s
