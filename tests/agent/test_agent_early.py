"""The agent's early report (unicache_agent.early): a read of a chunk the host has not heard
of is reported before the interval ends, at most once per EARLY_REPORT_MIN_S; nothing
extra while nothing new is read. A fake clock and fake counters drive the real agent."""

from __future__ import annotations

import json
from pathlib import Path

from unicache_agent.early import EARLY_POLL_S, EARLY_REPORT_MIN_S, EarlyReports
from unicache_agent.shm import ChunkCounts, Harvest

from tests.agent.test_agent_units import FakeHost


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class FakeCounters:
    """The shims' counters as the agent polls and harvests them."""

    def __init__(self) -> None:
        self.counted: dict[tuple[int, int], int] = {}
        self.slots_taken = 0
        self.looked = 0

    def read(self, fid: int, chunk: int) -> None:
        if (fid, chunk) not in self.counted:
            self.slots_taken += 1
        self.counted[(fid, chunk)] = self.counted.get((fid, chunk), 0) + 1

    def inserts(self) -> int:
        return self.slots_taken

    def active_chunks(self) -> set[tuple[int, int]]:
        self.looked += 1
        return set(self.counted)

    def harvest(self) -> Harvest:
        chunks = tuple(ChunkCounts(f, c, 4096 * n, n, 0, 0, 0, ((0, 4096 * n),))
                       for (f, c), n in sorted(self.counted.items()))
        self.counted = {}
        return Harvest(chunks, 0, 1)


def _ready(tmp_path: Path) -> tuple[FakeHost, FakeClock, FakeCounters]:
    clock, counters = FakeClock(), FakeCounters()
    h = FakeHost(tmp_path, counters=counters, clock=clock)
    h.handshake()  # reports every 60 s: only early ones in these tests
    return h, clock, counters


def _sent(h: FakeHost) -> list[dict[str, object]]:
    """The lines the agent sent so far, without waiting."""
    h.sock.setblocking(False)
    try:
        while True:
            h.buf += h.sock.recv(65536)
    except (BlockingIOError, TimeoutError):
        pass
    finally:
        h.sock.settimeout(5)
    lines, _, h.buf = h.buf.rpartition(b"\n")
    return [json.loads(x.lstrip(b"\xff")) for x in lines.split(b"\n") if x.strip()]


def _turn(h: FakeHost, clock: FakeClock, dt: float) -> None:
    clock.t += dt
    h.agent.step(0)


def test_a_fresh_chunk_is_reported_at_once_then_nothing_while_nothing_new(
        tmp_path: Path) -> None:
    h, clock, counters = _ready(tmp_path)
    _turn(h, clock, EARLY_POLL_S)
    assert _sent(h) == []  # nothing read
    counters.read(0xA, 0)
    _turn(h, clock, EARLY_POLL_S)
    (report,) = _sent(h)
    assert report["type"] == "report" and [c[:2] for c in report["chunks"]] == [["a", 0]]
    assert h.agent.early_reports == 1
    for _ in range(40):  # 2 s of the same chunk read: no report, the regions left alone
        counters.read(0xA, 0)
        _turn(h, clock, EARLY_POLL_S)
    # the regions looked at: first poll, the fresh read, its slot taken again after the
    # harvest; never again while the insert count stands
    assert _sent(h) == [] and counters.looked == 3


def test_early_reports_are_at_most_one_per_min_gap(tmp_path: Path) -> None:
    h, clock, counters = _ready(tmp_path)
    counters.read(0xA, 0)
    _turn(h, clock, EARLY_POLL_S)
    assert len(_sent(h)) == 1
    counters.read(0xB, 0)
    _turn(h, clock, EARLY_REPORT_MIN_S / 2)
    assert _sent(h) == []  # fresh, but too soon after the last report
    _turn(h, clock, EARLY_REPORT_MIN_S / 2)
    (report,) = _sent(h)
    assert [c[:2] for c in report["chunks"]] == [["b", 0]]


def test_a_new_table_makes_a_chunk_it_lacks_fresh_again(tmp_path: Path) -> None:
    h, clock, counters = _ready(tmp_path)
    counters.read(0xA, 0)
    counters.read(0xB, 0)
    _turn(h, clock, EARLY_POLL_S)
    assert len(_sent(h)) == 1
    # the host's answer holds b only: a is read again, and named once more
    h.send({"v": 1, "type": "placement", "version": 7, "part": 0, "parts": 1,
            "chunk_size": 65536, "min_read_size": 0, "entries": [["b", 0, [0], True, 1]]})
    assert [m["type"] for m in _sent(h)] == ["applied"]
    counters.read(0xB, 0)
    _turn(h, clock, EARLY_REPORT_MIN_S)
    assert _sent(h) == []  # b is in the table
    counters.read(0xA, 0)
    _turn(h, clock, EARLY_POLL_S)
    (report,) = _sent(h)
    assert ["a", 0] in [c[:2] for c in report["chunks"]]


def test_the_periodic_report_keeps_its_time_and_the_gap(tmp_path: Path) -> None:
    clock, counters = FakeClock(), FakeCounters()
    h = FakeHost(tmp_path, counters=counters, clock=clock)
    h.agent.step(0.1)
    h.recv(), h.recv()  # sync, hello
    h.send({"v": 1, "type": "welcome", "version": 1, "caps": [],
            "params": {"chunk_size": 65536, "min_read_size": 0, "report_interval_s": 1}})
    counters.read(0xA, 0)
    _turn(h, clock, 0.95)  # an early report 50 ms before the periodic one is due
    assert len(_sent(h)) == 1 and h.agent.early_reports == 1
    _turn(h, clock, 0.06)  # due, but 60 ms after the early one: it waits for the gap
    assert _sent(h) == []
    _turn(h, clock, 0.05)
    assert len(_sent(h)) == 1 and h.agent.early_reports == 1  # the periodic one
    _turn(h, clock, 0.5)
    assert _sent(h) == []


def test_the_rule_alone() -> None:
    rule = EarlyReports()
    assert rule.due_at() == float("inf")
    rule.table(3, [(1, 0)])
    assert not rule.saw({(1, 0)})
    assert rule.saw({(1, 0), (2, 0)}) and rule.due_at() == float("-inf")
    rule.reported([(2, 0)], 5.0)
    assert not rule.pending and not rule.saw({(2, 0)})
    assert rule.saw({(3, 0)}) and rule.due_at() == 5.0 + EARLY_REPORT_MIN_S
    rule.table(4, [])
    rule.reported([], 6.0)
    assert rule.saw({(2, 0)})  # reported under table 3 only
    small = EarlyReports(max_known=2)
    small.reported([(1, 0), (2, 0), (3, 0)], 1.0)
    assert small.saw({(1, 0)})  # nothing more remembered: any chunk is fresh


def test_every_harvest_tells_the_shims_so_their_open_runs_go_out(tmp_path: Path) -> None:
    # the table header's `harvests` (uc_layout.h): a shim thread's open run of counts goes to
    # the counters at its first call after it moves, so a slow reader waits one harvest
    h, clock, counters = _ready(tmp_path)
    before = h.table.harvests
    counters.read(0xA, 0)
    _turn(h, clock, EARLY_POLL_S)
    assert len(_sent(h)) == 1 and h.table.harvests == before + 1
    _turn(h, clock, EARLY_POLL_S)
    assert _sent(h) == [] and h.table.harvests == before + 1  # no report, no harvest
