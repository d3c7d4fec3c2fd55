"""When the daemon's next round runs: at its interval, or early for a chunk no round decided on.

The periodic round runs ``interval_s`` after the previous periodic round was recorded
(1 s by default). A guest that starts reading a new file reports it early (the agent's
``unicache_agent.early``); waiting for the next periodic round would add up to a whole
interval to the time until its table holds the file (docs/PERFORMANCE.md, "Reaction").
So a report that names a chunk no round of the last :data:`DECIDED_INTERVALS` intervals
took (placed, left unplaced or left alone: every chunk a round saw has a decision) asks
for a round now:

* at most one round per :data:`EARLY_ROUND_MIN_S` (any kind), and never two at once (the
  daemon runs one round at a time: the next waits for the last to be recorded);
* each VM asks for at most :data:`EARLY_ROUNDS_PER_INTERVAL` (3) early rounds in any
  interval: a guest that starts reading a few new files in a second gets each decided one
  early round after its first read (with one a second, a file opened within an interval
  of the last waited for the periodic round: up to 1.1 s, docs/PERFORMANCE.md,
  "Reaction"), while one that names new chunks in every report (a hostile one, or one
  reading a new file each tenth of a second) gets the rest decided at the periodic
  rounds, and cannot make the daemon run a round for every VM of the host ten times a
  second;
* the periodic round keeps its period (an early round does not move it);
* a steady guest, whose reports name only chunks the rounds keep seeing, asks for none:
  the daemon's CPU at the default interval stays what it was.

:class:`RoundTrigger` is the rule, pure (the caller passes the clock's readings);
``unicache-sim``'s live loop drives the same class. :class:`RoundPacer` is the daemon's
asyncio side of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable

from unicache.model import ChunkId, GuestReport

#: least time between the start of a round and the start of an early one (seconds)
EARLY_ROUND_MIN_S = 0.1
#: early rounds one VM may ask for in any interval (the rest wait for the periodic round)
EARLY_ROUNDS_PER_INTERVAL = 3
#: a chunk a round took is known for this many intervals after it was last reported
DECIDED_INTERVALS = 10
#: chunks known per VM (its reports hold at most the channel's 65,536 chunks pending)
MAX_DECIDED_PER_VM = 1 << 17


class RoundTrigger:
    """The rule: which reports ask for a round, and when the next round starts.

    :param interval_s: the periodic round's period.
    :param min_gap_s: least time from one round's start to an early round's.
    :param memory_s: how long a chunk a round took stays known (default
        :data:`DECIDED_INTERVALS` intervals).
    :param max_per_vm: chunks known per VM; past it the oldest are forgotten.
    :param early_per_vm: early rounds a VM may ask for in any interval.
    """

    def __init__(self, interval_s: float, min_gap_s: float = EARLY_ROUND_MIN_S,
                 memory_s: float | None = None,
                 max_per_vm: int = MAX_DECIDED_PER_VM,
                 early_per_vm: int = EARLY_ROUNDS_PER_INTERVAL) -> None:
        self.interval_s = interval_s
        self.min_gap_s = min_gap_s
        self.memory_s = DECIDED_INTERVALS * interval_s if memory_s is None else memory_s
        self.max_per_vm = max_per_vm
        self.early_per_vm = early_per_vm
        #: per VM, chunk -> when a round last took a report naming it
        self.decided: dict[str, dict[ChunkId, float]] = {}
        #: a report that arrived since the last drain named an undecided chunk
        self.wanted = False
        #: per VM, when its reports last asked for early rounds (the latest
        #: ``early_per_vm``)
        self.asked: dict[str, deque[float]] = {}
        #: when the last round started, and when the next periodic one is due
        self.last_start = float("-inf")
        self.periodic_at = float("-inf")
        #: rounds started early so far
        self.early_rounds = 0

    def undecided(self, report: GuestReport, now: float) -> bool:
        """Whether the report names a chunk no round took in the last ``memory_s``."""
        known = self.decided.get(report.vm, {})
        horizon = now - self.memory_s
        return any(known.get(a.chunk, horizon - 1.0) < horizon for a in report.chunks)

    def arrived(self, report: GuestReport, now: float) -> bool:
        """A report arrived (not yet drained by a round).

        :returns: whether an early round is wanted now.
        """
        if not self.wanted and self._may_ask(report.vm, now) and self.undecided(report, now):
            self.wanted = True
            self.asked.setdefault(report.vm, deque(maxlen=self.early_per_vm)).append(now)
        return self.wanted

    def _may_ask(self, vm: str, now: float) -> bool:
        """Whether the VM asked for fewer than ``early_per_vm`` early rounds in the
        interval before ``now``."""
        asked = self.asked.get(vm)
        if not asked or len(asked) < self.early_per_vm:
            return self.early_per_vm > 0
        return now - asked[0] >= self.interval_s

    def drained(self) -> None:
        """A round took every report that arrived so far: it answers them."""
        self.wanted = False

    def next_start(self) -> float:
        """When the next round may start: the periodic one, or an early one
        ``min_gap_s`` after the last start."""
        early = self.last_start + self.min_gap_s if self.wanted else float("inf")
        return min(max(self.periodic_at, self.last_start + self.min_gap_s), early)

    def started(self, now: float) -> bool:
        """A round starts at ``now``.

        :returns: whether it is an early one (the periodic one was not due yet).
        """
        early = now < self.periodic_at
        self.last_start = now
        self.early_rounds += early
        return early

    def took(self, reports: Iterable[GuestReport], live_vms: Iterable[str], now: float,
             periodic: bool) -> None:
        """A round took these reports and was recorded at ``now``; a periodic round's
        period starts again."""
        live = set(live_vms)
        for vm in [vm for vm in self.decided if vm not in live]:
            del self.decided[vm]
        for vm in [vm for vm in self.asked if vm not in live]:
            del self.asked[vm]
        for report in reports:
            if report.vm not in live:
                continue
            known = self.decided.setdefault(report.vm, {})
            for access in report.chunks:
                known[access.chunk] = now
            if len(known) > self.max_per_vm:
                self._forget(report.vm, now)
        if periodic:
            self.periodic_at = now + self.interval_s

    def _forget(self, vm: str, now: float) -> None:
        horizon = now - self.memory_s
        known = {c: t for c, t in self.decided[vm].items() if t >= horizon}
        if len(known) > self.max_per_vm:  # the most recent half stays
            cut = sorted(known.values())[len(known) // 2]
            known = {c: t for c, t in known.items() if t >= cut}
        self.decided[vm] = known


class RoundPacer:
    """The daemon's side of :class:`RoundTrigger`: reports wake it, rounds wait on it.

    :param trigger: the rule.
    :param clock: monotonic clock.
    """

    def __init__(self, trigger: RoundTrigger,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.trigger = trigger
        self.clock = clock
        self._wake = asyncio.Event()

    def arrived(self, report: GuestReport) -> None:
        """The channel server's ``on_arrival``: an undecided chunk wakes the wait."""
        if self.trigger.arrived(report, self.clock()):
            self._wake.set()

    async def wait(self, stop: asyncio.Event) -> None:
        """Until the next round may start (or ``stop`` is set)."""
        while not stop.is_set():
            delay = self.trigger.next_start() - self.clock()
            if delay <= 0:
                return
            self._wake.clear()
            waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())}
            try:
                await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await w
