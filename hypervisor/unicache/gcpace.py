"""Python's cycle collector kept out of the policy round: collect between rounds, freeze
what survives.

At fleet scale the daemon's round state is about ten million Python objects (a million
tracked chunks, their ids and counts). CPython's collector scans every object it tracks
in a full (generation 2) collection, which it starts by itself once enough objects have
survived since the last: 300-400 ms over that state on this machine, inside whichever
round allocates at the time (``unicache bench policy`` without pacing: two such rounds in
100, p99 372 ms against 71 ms for the median; docs/PERFORMANCE.md).

So after each round, off the round's clock, the daemon collects what the round left (the
objects made since the previous round: a few milliseconds at fleet scale) and freezes
what survives (:func:`gc.freeze`: a permanent generation that collections skip, while
reference counts still free whatever becomes garbage, frozen or not). Collections during
a round then look at that round's objects only. What freezing gives up is a cycle that
becomes garbage after it was frozen (a closed channel's protocol and transport, say):
only a collection over everything finds it. The daemon runs one every ``full_every_s``
(default ten minutes), between rounds, and says how long it took; the first pass after
start is one, so the state restored from the checkpoint is scanned once and frozen.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

#: seconds between collections over every object (frozen ones too)
FULL_EVERY_S = 600.0


@dataclass(frozen=True, slots=True)
class GcPass:
    """One pass between rounds.

    :param full: it looked at every object, frozen ones too.
    :param found: unreachable objects it found.
    :param seconds: how long it took (wall).
    :param frozen: objects frozen after a full pass (0 after the others: counting them
        takes a pass over them).
    """

    full: bool
    found: int
    seconds: float
    frozen: int


class GcPacer:
    """The collector's work between rounds (module docstring).

    :param full_every_s: seconds between full passes.
    :param clock: a monotonic clock (seconds).
    """

    def __init__(
        self, full_every_s: float = FULL_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.full_every_s = full_every_s
        self.clock = clock
        self._last_full: float | None = None

    def settle(self) -> GcPass:
        """Collect what the last round left and freeze the rest; every ``full_every_s``,
        collect over every object first."""
        now = self.clock()
        full = self._last_full is None or now - self._last_full >= self.full_every_s
        started = time.perf_counter()
        if full:
            gc.unfreeze()
            self._last_full = now
        # (a collection skips the frozen objects: between full passes it looks at what
        # was made since the last pass only)
        found = gc.collect()
        gc.freeze()
        seconds = time.perf_counter() - started
        # counting the frozen objects walks them all (4 ms at 600,000): full passes only
        return GcPass(full, found, seconds, gc.get_freeze_count() if full else 0)

    @staticmethod
    def release() -> None:
        """Give every frozen object back to the collector (the daemon's exit: a process
        that goes on, such as a test run, collects as before)."""
        gc.unfreeze()
