"""The simulated shim's per-open sampling (unicache_sim.guest.opensample): the rule, the agent's
constants it mirrors, and what the guest shim does with an open (its cost, its counts)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from unicache.model import ChunkId, PlacementEntry, PlacementTable, PublishPlacement
from unicache_sim.engine.config import from_topology
from unicache_sim.guest import opensample
from unicache_sim.guest.opensample import (
    AGENT_OPEN_SAMPLE,
    COUNTED_WHOLE,
    EVERY_OPEN,
    SKIPPED,
    SMALL_FILES_SAMPLE,
    OpenFile,
    OpenSample,
    decide,
)
from unicache_sim.guest.shim import GuestShim
from unicache_sim.guest.shimcost import TABLE_STATES, ShimCost
from unicache_sim.guest.simhost import SimHost

from tests.topologies import TOPO_OPTERON_16

KIB = 1024
CHUNK = 256 * KIB
SIZES = (512, 4096, 16384, 65536, 262144)
#: distinct figures, so that a charge of the wrong kind is caught
COST = ShimCost("test", 2.0, SIZES, {s: (10.0,) * 5 for s in TABLE_STATES},
                (4096, 16384, 65536), (500.0, 600.0, 700.0), (70.0, 80.0, 90.0))


def _agent_shm() -> Any:
    """unicache_agent.shm (the guest agent is imported from guest-agent/, which importing
    tests.agent puts on the path first)."""
    import tests.agent  # noqa: F401

    return importlib.import_module("unicache_agent.shm")


def test_the_default_and_the_opt_in_are_the_agents() -> None:
    agent = _agent_shm()
    assert AGENT_OPEN_SAMPLE.max_bytes == agent.AGENT_OPEN_SAMPLE.max_bytes
    assert AGENT_OPEN_SAMPLE.shift == agent.AGENT_OPEN_SAMPLE.shift
    assert AGENT_OPEN_SAMPLE == EVERY_OPEN  # the default counts every open whole
    assert (SMALL_FILES_SAMPLE.max_bytes, SMALL_FILES_SAMPLE.shift) == (
        agent.SMALL_FILES_SAMPLE.max_bytes, agent.SMALL_FILES_SAMPLE.shift)
    assert (opensample.SAMPLE_MAX_BYTES, opensample.SAMPLE_SHIFT) == (256 * KIB, 3)
    assert (EVERY_OPEN.max_bytes, EVERY_OPEN.shift) == (
        agent.EVERY_OPEN.max_bytes, agent.EVERY_OPEN.shift)


def test_one_small_read_only_open_in_eight_is_counted_eight_times() -> None:
    s = SMALL_FILES_SAMPLE
    assert decide(16 * KIB, True, False, 0.0, s) == 8
    assert decide(16 * KIB, True, False, 0.124, s) == 8
    assert decide(16 * KIB, True, False, 0.125, s) is None
    assert decide(256 * KIB, True, False, 0.9, s) is None  # max_bytes is sampled too
    draws = [i / 1000 for i in range(1000)]
    assert sum(decide(4 * KIB, True, False, d, s) is not None for d in draws) == 125


@pytest.mark.parametrize("draw", [0.0, 0.5, 0.99])
def test_a_file_the_table_names_is_counted_whole_whatever_the_draw(draw: float) -> None:
    assert decide(16 * KIB, True, True, draw, SMALL_FILES_SAMPLE) == 1


@pytest.mark.parametrize(
    ("file_bytes", "read_only", "sample"),
    [
        (256 * KIB + 1, True, SMALL_FILES_SAMPLE),  # larger than max_bytes
        (16 * KIB, False, SMALL_FILES_SAMPLE),  # opened for writing
        (16 * KIB, True, EVERY_OPEN),  # shift 0
        (16 * KIB, True, AGENT_OPEN_SAMPLE),  # the agent's default
        (16 * KIB, True, OpenSample(64 * KIB, 0)),
    ],
)
def test_other_opens_are_counted_whole(file_bytes: int, read_only: bool,
                                       sample: OpenSample) -> None:
    for draw in (0.0, 0.5, 0.99):
        assert decide(file_bytes, read_only, False, draw, sample) == 1


def test_a_decision_is_an_open_file() -> None:
    assert opensample.open_file(None) == SKIPPED == OpenFile(False, 0)
    assert opensample.open_file(1) == COUNTED_WHOLE == OpenFile(True, 1)
    assert opensample.open_file(8) == OpenFile(True, 8)


# Section: the guest shim's opens -----------------------------------------------------------


def _host() -> tuple[SimHost, int, int]:
    cfg = from_topology(TOPO_OPTERON_16)
    engine = cfg.engine()
    host = SimHost(cfg, engine, "vm0", period_cycles=1e6)
    tid = engine.add_thread(0)
    host.add_thread(tid, 0)
    return host, tid, engine.add_object(64 * KIB)


def _publish(host: SimHost, *chunks: ChunkId) -> None:
    entries = tuple(PlacementEntry(c, frozenset({0}), True, 0) for c in chunks)
    table = PlacementTable("vm0", 1, CHUNK, CHUNK, entries)
    host.act([PublishPlacement("vm0", table, "test")])


def _compute(host: SimHost, tid: int) -> float:
    assert host.engine.run() == ("need", tid)
    return host.engine.thread_stats(tid).compute_cycles


def test_a_named_file_is_counted_whole_and_a_large_one_too() -> None:
    host, tid, obj = _host()
    _publish(host, ChunkId(3, 0))
    shim = GuestShim(host, COST, SMALL_FILES_SAMPLE)
    # every open of file 3 (named) and of a 1 MiB file is counted whole
    assert {shim.open_file(tid, 3, 16 * KIB) for _ in range(50)} == {COUNTED_WHOLE}
    assert {shim.open_file(tid, 4, 1 << 20) for _ in range(50)} == {COUNTED_WHOLE}
    # the others of 16 KiB: about one in eight, at scale 8
    opened = [shim.open_file(tid, 5, 16 * KIB) for _ in range(800)]
    assert set(opened) == {SKIPPED, OpenFile(True, 8)}
    assert 60 < sum(o.counted for o in opened) < 140


def test_the_sample_applies_before_the_hosts_first_table() -> None:
    # the agent publishes an empty table with the sample as it starts
    host, tid, _ = _host()
    shim = GuestShim(host, COST, SMALL_FILES_SAMPLE)
    assert SKIPPED in {shim.open_file(tid, 5, 16 * KIB) for _ in range(50)}


@pytest.mark.parametrize("sample", [EVERY_OPEN, None], ids=["every-open", "the-default"])
def test_counting_every_open_counts_every_open_whole(sample: OpenSample | None) -> None:
    host, tid, _ = _host()
    shim = GuestShim(host, COST, sample) if sample else GuestShim(host, COST)
    assert {shim.open_file(tid, 5, 16 * KIB) for _ in range(50)} == {COUNTED_WHOLE}


def test_a_counted_files_counts_go_out_scaled() -> None:
    host, tid, obj = _host()
    shim = GuestShim(host, COST, SMALL_FILES_SAMPLE)
    sampled = OpenFile(True, 8)
    shim.read_chunk(tid, obj, ChunkId(5, 0), 0, 4 * KIB, 0.0, 16 * KIB, sampled)
    shim.read_chunk(tid, obj, ChunkId(5, 0), 4 * KIB, 12 * KIB, 0.0, 16 * KIB, sampled)
    _compute(host, tid)
    (report,) = host.observe().reports
    (access,) = report.chunks
    # two calls, one run (the second continues the first): all of it times eight
    assert access.bytes_read == 8 * 16 * KIB and access.reads == 8
    assert access.vcpu_bytes == ((0, 8 * 16 * KIB),)


def test_a_skipped_file_pays_its_open_and_nothing_else() -> None:
    host, tid, obj = _host()
    _publish(host, ChunkId(3, 0))
    shim = GuestShim(host, COST, SMALL_FILES_SAMPLE, seed=1)
    while (opened := shim.open_file(tid, 5, 16 * KIB)).counted:
        pass  # an open that loses the draw
    paid = _compute(host, tid)
    shim.read_chunk(tid, obj, ChunkId(5, 0), 0, 16 * KIB, 0.0, 16 * KIB, opened)
    assert _compute(host, tid) == paid  # the call costs the shim nothing
    (report,) = host.observe().reports
    assert report.chunks == ()  # and nothing is counted
    # every open before it was counted, each charged its figure less its call; the last
    # skipped, charged the skipped figure alone
    counted = (paid - 80.0 * 2.0) / ((600.0 - 10.0) * 2.0)
    assert counted == pytest.approx(round(counted)) and round(counted) >= 0


def test_the_draws_are_the_seeds() -> None:
    def draws(seed: int) -> list[OpenFile]:
        host, tid, _ = _host()
        shim = GuestShim(host, COST, SMALL_FILES_SAMPLE, seed=seed)
        return [shim.open_file(tid, 5, 16 * KIB) for _ in range(64)]

    assert draws(1) == draws(1) != draws(2)
