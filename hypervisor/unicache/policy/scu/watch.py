"""SCU's watch: a VM's reads, observed placed and unplaced, must not get slower.

SCU's cost model (:mod:`unicache.policy.scu.cost`) predicts; the watch checks what happened,
as MFC §4.5's competitive rule stops migrating for a file once the migrations have cost
more than loading it from DRAM would have.

Each round it measures a VM's reads twice over (:class:`ReadRate`): bytes its guest read
(the agent's report) per second of the interval, which falls when readers wait for one
another, and per busy vCPU-second (the counter samples' ``busy``), which falls when each
byte costs more CPU. It files the measurement as *placed* (SCU's entries were in the VM's
table through the interval) or *unplaced*. An interval right after a change of standing is
not counted: caches are still filling or draining then, and neither rate would be fair.

* A VM SCU has never measured unplaced is not placed yet: one settled unplaced interval
  first (one round at the daemon's period), so there is something to compare with. A VM
  whose reads come without busy times cannot be measured: the cost model alone decides.
* Once both are known, a VM whose placed reads fall below ``1 - WATCH_TOLERANCE`` of its
  unplaced ones by either measure is left alone for a back-off of rounds, doubled each
  time it happens again (workloads change: it is tried again later, measured afresh), and
  the decision log gives the rates.

Rates are smoothed over the intervals of one standing (``WATCH_SMOOTHING``). Pure: no I/O,
no clock; the round number is SCU's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from unicache.model import Observation

#: placed reads may run this much slower than unplaced ones before the watch steps in
#: (the project's "never slower" bound: 0.98 of linux)
WATCH_TOLERANCE = 0.02
#: rounds a VM stays unplaced after the watch saw it lose; doubled on each repeat
WATCH_BACKOFF_ROUNDS = 30
#: the longest back-off, in rounds
WATCH_MAX_BACKOFF_ROUNDS = 960
#: weight of the newest interval in a standing's rate (exponential smoothing)
WATCH_SMOOTHING = 0.5


@dataclass(frozen=True, slots=True)
class ReadRate:
    """How fast a VM read in one standing.

    :param per_second: bytes per second of the interval.
    :param per_busy_second: bytes per busy vCPU-second.
    """

    per_second: float
    per_busy_second: float

    def below(self, other: ReadRate, tolerance: float) -> bool:
        """Whether either measure falls short of ``other``'s by more than ``tolerance``."""
        return (
            self.per_second < (1 - tolerance) * other.per_second
            or self.per_busy_second < (1 - tolerance) * other.per_busy_second
        )

    def blend(self, newer: ReadRate) -> ReadRate:
        """Exponential smoothing towards a newer measurement."""
        keep = 1 - WATCH_SMOOTHING
        return ReadRate(
            WATCH_SMOOTHING * newer.per_second + keep * self.per_second,
            WATCH_SMOOTHING * newer.per_busy_second + keep * self.per_busy_second,
        )

    def __str__(self) -> str:
        return (
            f"{self.per_second / 1e6:.1f} MB/s, "
            f"{self.per_busy_second / 1e6:.1f} MB per busy vCPU-second"
        )


@dataclass(frozen=True, slots=True)
class ReadRates:
    """What the watch knows of one VM.

    :param unplaced: smoothed rate while unplaced (None: unknown).
    :param placed: the same while placed (None: unknown).
    :param was_placed: the VM's standing in the last interval it read in (None: none yet).
    :param hold_until: the watch keeps the VM unplaced until this round (0: it does not).
    :param backoff: the next hold, in rounds.
    """

    unplaced: ReadRate | None = None
    placed: ReadRate | None = None
    was_placed: bool | None = None
    hold_until: int = 0
    backoff: int = WATCH_BACKOFF_ROUNDS


@dataclass(frozen=True, slots=True)
class WatchVerdict:
    """Why the watch keeps a VM unplaced this round.

    :param reason: one line for the decision log.
    """

    reason: str


def read_rates(obs: Observation) -> dict[str, ReadRate]:
    """How fast each VM that read and ran in this interval read."""
    busy: dict[str, float] = {}
    for sample in obs.samples:
        busy[sample.vcpu.vm] = busy.get(sample.vcpu.vm, 0.0) + max(sample.busy, 0.0)
    read: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for report in obs.reports:
        read[report.vm] = read.get(report.vm, 0) + sum(a.bytes_read for a in report.chunks)
        seconds[report.vm] = max(seconds.get(report.vm, 0.0), report.interval_s)
    return {
        vm: ReadRate(nbytes / seconds[vm], nbytes / (busy[vm] * seconds[vm]))
        for vm, nbytes in read.items()
        if nbytes > 0 and busy.get(vm, 0.0) > 0.0 and seconds[vm] > 0.0
    }


def watch_round(
    rates: Mapping[str, ReadRate],
    placed: Iterable[str],
    known: Mapping[str, ReadRates],
    live: Iterable[str],
    round_no: int,
) -> tuple[dict[str, ReadRates], dict[str, WatchVerdict]]:
    """Update each VM's rates with this interval's and say which VMs stay unplaced.

    :param rates: this interval's read rate per VM (:func:`read_rates`).
    :param placed: VMs whose tables held SCU's entries through this interval.
    :param known: what the watch knew before.
    :param live: the VMs that exist (the others are forgotten).
    :param round_no: this round's number.
    :returns: the new knowledge, and the VMs the watch keeps unplaced with why.
    """
    placed = frozenset(placed)
    out: dict[str, ReadRates] = {}
    verdicts: dict[str, WatchVerdict] = {}
    for vm in sorted(live):
        now = known.get(vm, ReadRates())
        if now.hold_until and round_no >= now.hold_until:
            now = replace(now, hold_until=0, placed=None)  # try again, measured afresh
        rate = rates.get(vm)
        if rate is not None:
            standing = vm in placed
            # the first interval of a standing is not counted: caches fill or drain in it
            if now.was_placed is standing:
                now = _counted(now, standing, rate)
            else:
                now = replace(now, was_placed=standing)
        if now.hold_until:
            verdicts[vm] = WatchVerdict(
                f"the watch keeps it unplaced until round {now.hold_until}: placed, it read "
                f"{now.placed} against {now.unplaced} unplaced"
            )
        elif now.unplaced is None and now.was_placed is not None:
            verdicts[vm] = WatchVerdict("measuring its reads unplaced first")
        elif now.placed and now.unplaced and now.placed.below(now.unplaced, WATCH_TOLERANCE):
            verdicts[vm] = WatchVerdict(
                f"placed, it read {now.placed} against {now.unplaced} unplaced: "
                f"unplaced for {now.backoff} rounds"
            )
            now = replace(
                now,
                hold_until=round_no + now.backoff,
                backoff=min(2 * now.backoff, WATCH_MAX_BACKOFF_ROUNDS),
            )
        out[vm] = now
    return out, verdicts


def _counted(now: ReadRates, placed: bool, rate: ReadRate) -> ReadRates:
    old = now.placed if placed else now.unplaced
    new = rate if old is None else old.blend(rate)
    return replace(now, placed=new) if placed else replace(now, unplaced=new)
