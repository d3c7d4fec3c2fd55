"""The collector's work between rounds (unicache.gcpace): each pass collects the last
round's garbage and freezes the rest; a full pass every ``full_every_s`` also finds the
cycles that became garbage after they were frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from unicache.gcpace import GcPacer


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    # freezing is process-wide: the rest of the test run collects as before
    yield
    gc.unfreeze()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_pass_is_full_and_freezes_what_survives() -> None:
    pacer = GcPacer(full_every_s=600.0, clock=_Clock())
    kept = [_Node() for _ in range(100)]
    swept = pacer.settle()
    assert swept.full and swept.frozen >= len(kept) and gc.get_freeze_count() == swept.frozen
    assert gc.get_count()[2] == 0  # every survivor left the generations collections scan


def test_a_rounds_garbage_cycle_is_collected_by_the_next_pass() -> None:
    clock = _Clock()
    pacer = GcPacer(full_every_s=600.0, clock=clock)
    pacer.settle()
    dead = _cycle()  # made after the freeze, garbage at once
    clock.now = 1.0
    swept = pacer.settle()
    assert not swept.full and dead() is None and swept.found >= 2


def test_a_cycle_frozen_while_alive_waits_for_the_full_pass() -> None:
    clock = _Clock()
    pacer = GcPacer(full_every_s=600.0, clock=clock)
    pacer.settle()
    holder = [_Node(), _Node()]
    holder[0].other, holder[1].other = holder[1], holder[0]
    later = weakref.ref(holder[0])
    clock.now = 1.0
    pacer.settle()  # frozen while alive
    holder.clear()  # garbage now, but frozen: a short pass does not see it
    clock.now = 2.0
    assert not pacer.settle().full and later() is not None
    clock.now = 601.0
    assert pacer.settle().full and later() is None


def test_release_gives_the_frozen_objects_back() -> None:
    pacer = GcPacer(clock=_Clock())
    pacer.settle()
    assert gc.get_freeze_count() > 0
    pacer.release()
    assert gc.get_freeze_count() == 0
