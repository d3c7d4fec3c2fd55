"""The daemon's early rounds (unicache.roundpace): a report naming a chunk no round decided on
asks for a round now, at most one per EARLY_ROUND_MIN_S; the periodic round keeps its
period; a steady guest asks for none."""

from __future__ import annotations

import asyncio
import time

from unicache.model import ChunkAccess, ChunkId, GuestReport
from unicache.roundpace import (
    EARLY_ROUND_MIN_S,
    EARLY_ROUNDS_PER_INTERVAL,
    RoundPacer,
    RoundTrigger,
)


def _report(vm: str, *chunks: tuple[int, int]) -> GuestReport:
    return GuestReport(vm, 1, 1.0, tuple(ChunkAccess(ChunkId(f, i), 4096, 1, 0, ((0, 4096),))
                                         for f, i in chunks))


def _round(trigger: RoundTrigger, now: float, *reports: GuestReport) -> bool:
    """One round at ``now`` taking ``reports``; whether it was early."""
    early = trigger.started(now)
    trigger.drained()
    trigger.took(reports, ["vm"], now, periodic=not early)
    return early


def test_a_new_chunk_asks_for_a_round_after_the_min_gap_and_a_known_one_does_not() -> None:
    t = RoundTrigger(1.0)
    assert t.next_start() == float("-inf")  # the first round at once
    assert not _round(t, 10.0, _report("vm", (1, 0)))
    assert t.next_start() == 11.0
    assert not t.arrived(_report("vm", (1, 0)), 10.3)  # decided last round: steady
    assert t.next_start() == 11.0
    assert t.arrived(_report("vm", (1, 0), (2, 0)), 10.05)
    assert t.next_start() == 10.0 + EARLY_ROUND_MIN_S
    assert _round(t, 10.1, _report("vm", (1, 0), (2, 0)))
    assert t.next_start() == 11.0  # the periodic round keeps its period
    assert not t.arrived(_report("vm", (2, 0)), 10.2)
    assert not _round(t, 11.0)
    assert t.early_rounds == 1


def test_a_report_arriving_during_a_round_asks_for_the_next() -> None:
    t = RoundTrigger(1.0)
    _round(t, 0.0)
    t.started(1.0)
    t.drained()
    assert t.arrived(_report("vm", (3, 0)), 1.05)  # after the drain: not this round's
    t.took((), ["vm"], 1.06, periodic=True)
    assert t.next_start() == 1.0 + EARLY_ROUND_MIN_S


def test_a_steady_guest_asks_for_no_extra_round() -> None:
    t = RoundTrigger(1.0)
    steady = _report("vm", (1, 0), (2, 0), (3, 0))
    now = 0.0
    for _ in range(30):
        assert not _round(t, now, steady)
        now += 0.5
        t.arrived(steady, now)  # the agent's periodic report, mid-interval
        now = t.next_start()
    assert t.early_rounds == 0


def test_a_guest_starting_a_few_new_files_in_an_interval_gets_an_early_round_for_each() -> None:
    t = RoundTrigger(1.0)
    _round(t, 0.0)
    now = 0.2
    for chunk in range(1, EARLY_ROUNDS_PER_INTERVAL + 1):  # a new file every 0.2 s
        assert t.arrived(_report("vm", (chunk, 0)), now)
        assert t.next_start() <= now + EARLY_ROUND_MIN_S
        assert _round(t, now, _report("vm", (chunk, 0)))
        now = round(now + 0.2, 3)
    # one more in the same interval waits for the periodic round
    late = _report("vm", (EARLY_ROUNDS_PER_INTERVAL + 1, 0))
    assert not t.arrived(late, now)
    assert t.next_start() == 1.0
    # an interval after the first early ask, the VM may ask again
    assert t.arrived(_report("vm", (99, 0)), 1.25)


def test_a_guest_naming_new_chunks_in_every_report_gets_a_few_early_rounds_an_interval(
) -> None:
    t = RoundTrigger(1.0)
    _round(t, 0.0)
    now, rounds = 0.05, 0
    for chunk in range(1, 101):  # ten seconds of reports every 0.1 s, each a new chunk
        t.arrived(_report("vm", (chunk, 0)), now)
        if t.next_start() <= now + EARLY_ROUND_MIN_S / 2:
            _round(t, now, _report("vm", (chunk, 0)))
            rounds += 1
        now = round(now + EARLY_ROUND_MIN_S, 3)
    # at most EARLY_ROUNDS_PER_INTERVAL a second, not ten
    assert EARLY_ROUNDS_PER_INTERVAL <= t.early_rounds <= 10 * EARLY_ROUNDS_PER_INTERVAL
    assert rounds <= 10 + 10 * EARLY_ROUNDS_PER_INTERVAL  # the periodic rounds and those
    t.took((), [], now, periodic=True)  # the VM went away: nothing of it is kept
    assert t.asked == {}


def test_chunks_are_forgotten_after_the_memory_and_with_their_vm() -> None:
    t = RoundTrigger(1.0, memory_s=5.0)
    _round(t, 0.0, _report("vm", (1, 0)))
    assert not t.undecided(_report("vm", (1, 0)), 4.0)
    assert t.undecided(_report("vm", (1, 0)), 6.0)
    t.took((), [], 6.0, periodic=True)  # the VM went away
    assert t.decided == {}
    bounded = RoundTrigger(1.0, max_per_vm=4)
    for i in range(10):
        _round(bounded, float(i), _report("vm", (i, 0)))
        assert len(bounded.decided["vm"]) <= 4


def test_the_pacer_wakes_for_an_undecided_chunk_and_not_for_a_known_one() -> None:
    async def main() -> tuple[float, float]:
        trigger = RoundTrigger(30.0)
        pacer = RoundPacer(trigger)
        stop = asyncio.Event()
        trigger.started(time.monotonic())
        trigger.took((_report("vm", (1, 0)),), ["vm"], time.monotonic(), periodic=True)
        waiting = asyncio.ensure_future(pacer.wait(stop))
        await asyncio.sleep(0.2)
        pacer.arrived(_report("vm", (1, 0)))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # a known chunk: the periodic round, 30 s away
        t0 = time.monotonic()
        pacer.arrived(_report("vm", (9, 0)))
        await asyncio.wait_for(waiting, 20.0)
        woke = time.monotonic() - t0
        stopped = asyncio.ensure_future(pacer.wait(stop))
        stop.set()
        await asyncio.wait_for(stopped, 20.0)
        return woke, trigger.next_start()

    woke, _ = asyncio.run(main())
    assert woke < 15.0  # not the periodic round's 30 s
