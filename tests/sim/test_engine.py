"""The native engine through its Python binding: machines from models, costs, errors."""

from __future__ import annotations

import pytest
import unicache_sim as us
from unicache.errors import ConfigError, UnicacheError
from unicache.topology.toml import load_model, model_names
from unicache_sim.engine.config import from_topology, oracle

from tests.topologies import TOPO_OPTERON_16

LINE = 64


@pytest.mark.parametrize("name", model_names())
def test_every_shipped_model_builds_a_machine(name: str) -> None:
    topo = load_model(name)
    cfg = from_topology(topo)
    engine = cfg.engine()
    assert engine.n_cpus == len(topo.cpus)
    assert len(engine.source_names()) == len(topo.levels) + 4


def test_oracle_merges_every_level_into_one_shared_instance() -> None:
    cfg = from_topology(TOPO_OPTERON_16)
    orc = oracle(cfg)
    assert orc.on_chip_bytes() == cfg.on_chip_bytes()
    assert all(set(lv.instance_of) == {0} for lv in orc.levels)
    assert orc.migration_cycles == 0.0


def test_dram_bandwidth_scale_slows_the_queue_server() -> None:
    topo = TOPO_OPTERON_16
    full = from_topology(topo).nodes[0].service_line_cycles
    eighth = from_topology(topo, dram_bw_scale=0.125).nodes[0].service_line_cycles
    assert eighth == pytest.approx(8 * full)
    with pytest.raises(ConfigError):
        from_topology(topo, dram_bw_scale=0.0)


def test_simulator_errors_are_unicache_errors_with_one_line() -> None:
    engine = from_topology(TOPO_OPTERON_16).engine()
    with pytest.raises(UnicacheError) as info:
        engine.add_thread(99)
    assert isinstance(info.value, us.SimulatorError)
    assert "\n" not in str(info.value) and "cpu" in str(info.value)


def test_access_outside_an_object_is_refused() -> None:
    engine = from_topology(TOPO_OPTERON_16).engine()
    obj = engine.add_object(4096)
    tid = engine.add_thread(0)
    with pytest.raises(us.SimulatorError):
        engine.push_access(tid, obj, 4000, 200)


def _stream(engine: us.Engine, tid: int, obj: int, size: int, kind: str = "read") -> None:
    engine.push_access(tid, obj, 0, size, kind)  # type: ignore[arg-type]
    assert engine.run() == ("need", tid)


def test_non_temporal_reads_leave_the_caches_empty() -> None:
    engine = from_topology(TOPO_OPTERON_16).engine()
    obj = engine.add_object(64 * 1024)
    tid = engine.add_thread(0)
    _stream(engine, tid, obj, 64 * 1024, "nt")
    assert all(engine.occupancy(level, 0) == 0 for level in range(3))
    _stream(engine, tid, obj, 64 * 1024, "read")
    assert engine.occupancy(0, 0) > 0


def test_second_read_of_a_small_file_is_served_on_chip() -> None:
    engine = from_topology(TOPO_OPTERON_16).engine()
    obj = engine.add_object(256 * 1024)
    tid = engine.add_thread(0)
    _stream(engine, tid, obj, 256 * 1024)
    engine.reset_stats()
    _stream(engine, tid, obj, 256 * 1024)
    stats = engine.thread_stats(tid)
    assert stats.dram_lines == 0 and stats.lines == 256 * 1024 // LINE


def test_first_touch_places_pages_on_the_reader_node() -> None:
    topo = TOPO_OPTERON_16
    engine = from_topology(topo).engine()
    obj = engine.add_object(8192)
    tid = engine.add_thread(12)  # node 3
    _stream(engine, tid, obj, 8192)
    frame = engine.object_frame(obj, 0)
    assert frame is not None
    node_bytes = topo.nodes[0].memory_bytes
    assert frame * 4096 // node_bytes == 3


def test_colored_objects_get_frames_of_their_colors() -> None:
    engine = from_topology(TOPO_OPTERON_16).engine()
    obj = engine.add_object(64 * 4096, "colored", node=1, n_colors=32, color_mask=0b1010)
    tid = engine.add_thread(4)
    _stream(engine, tid, obj, 64 * 4096)
    for page in range(64):
        frame = engine.object_frame(obj, page)
        assert frame is not None and frame % 32 in (1, 3)


def test_migration_costs_the_model_cycles() -> None:
    cfg = from_topology(TOPO_OPTERON_16)
    engine = cfg.engine()
    tid = engine.add_thread(0)
    engine.push_migrate(tid, 5, cfg.migration_cycles_remote)
    assert engine.run() == ("need", tid)
    stats = engine.thread_stats(tid)
    assert stats.migrations == 1 and stats.migration_cycles == cfg.migration_cycles_remote
    assert engine.thread_cpu(tid) == 5


def test_dram_saturation_caps_aggregate_bandwidth() -> None:
    # 8 threads stream distinct data from node 0 with its bandwidth cut 8x: the aggregate
    # rate must stop at the node's bandwidth, so each thread runs far slower than alone.
    cfg = from_topology(TOPO_OPTERON_16, dram_bw_scale=0.125)
    size = 1024 * 1024

    def run(n: int) -> float:
        engine = cfg.engine()
        objs = [engine.add_object(size, "node", 0) for _ in range(n)]
        tids = [engine.add_thread(cpu) for cpu in range(n)]
        for tid, obj in zip(tids, objs, strict=True):
            engine.push_access(tid, obj, 0, size)
        done = 0
        while done < n:
            stop, tid = engine.run()
            assert stop == "need"
            engine.retire(tid)
            done += 1
        return max(engine.thread_time(t) for t in tids)

    alone, crowd = run(1), run(8)
    service = cfg.nodes[0].service_line_cycles
    assert crowd >= 0.95 * 8 * size / LINE * service
    assert crowd > 3 * alone
