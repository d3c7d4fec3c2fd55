"""When the agent reports before its interval ends: a chunk read that the host has not heard of.

The agent reports every ``report_interval_s`` (the daemon's round period, 1 s by
default). A guest that starts reading a new file would wait up to that long for the
report and as long again for the round that places it. So, besides the periodic report,
the agent reports *early* when the shims counted reads of a chunk that is *fresh*:
neither in the table the agent holds now nor in any report it sent since that table
arrived. The daemon runs a round on such a report (``unicache.roundpace``).

Why "since the table arrived": the table is the host's answer to the reports before it.
A chunk still missing from a newer table was either decided against (the daemon knows it
and runs no round) or was reported while a round ran; naming it once more per table
heals that race and a daemon that restarted and forgot, and the set of chunks
remembered lasts one table. A steady guest gets no new tables and sends nothing extra.

Early reports are at most one per :data:`EARLY_REPORT_MIN_S` (the periodic report
waits for that gap too), so a guest's reports stay at most 10 a second, and the daemon's
rounds (so its tables, so the agent's ``applied`` answers) as many: 20 messages a second
at most, the channel's ``MAX_MESSAGES_PER_SECOND``. Pure: the agent passes the clock's
readings; ``unicache-sim`` mirrors it (``unicache_sim.guest.earlyreport``, tied by a test).
"""

from __future__ import annotations

from typing import AbstractSet, Iterable, Set, Tuple

#: least time between two reports of the agent, early or periodic (seconds)
EARLY_REPORT_MIN_S = 0.1
#: how often the agent looks at the shims' insert counts for a fresh chunk (seconds; one
#: 8-byte read per user's counters file: the regions are read only when the count moved)
EARLY_POLL_S = 0.05
#: chunks remembered per table (table entries and chunks reported since); past it the
#: agent stops remembering and a fresh chunk is any chunk, still at most one report per
#: EARLY_REPORT_MIN_S
MAX_KNOWN_CHUNKS = 1 << 17

ChunkKeyT = Tuple[int, int]


class EarlyReports:
    """The early-report rule: which chunks are fresh, and when a report may go.

    :param min_gap_s: least time between two reports.
    :param max_known: chunks remembered per table.
    """

    def __init__(self, min_gap_s: float = EARLY_REPORT_MIN_S,
                 max_known: int = MAX_KNOWN_CHUNKS) -> None:
        self.min_gap_s = min_gap_s
        self.max_known = max_known
        #: the current table's version (-1: the agent's own empty table)
        self.version = -1
        #: (file_id, chunk) the host has heard of under the current table
        self.known: Set[ChunkKeyT] = set()
        #: when the last report went (None: none yet)
        self.last_report_t: float = float("-inf")
        #: a fresh chunk was read and waits for the next report
        self.pending = False

    def table(self, version: int, chunks: Iterable[ChunkKeyT]) -> None:
        """A table arrived: the host heard of what it holds, and nothing reported before
        counts any more (see the module's docstring)."""
        self.version = version
        self.known = set(chunks)
        if len(self.known) > self.max_known:
            self.known = set()

    def reported(self, chunks: Iterable[ChunkKeyT], now: float) -> None:
        """A report (early or periodic) went with these chunks at ``now``."""
        self.last_report_t = now
        self.pending = False
        for key in chunks:
            if len(self.known) >= self.max_known:
                break
            self.known.add(key)

    def fresh(self, read: AbstractSet[ChunkKeyT]) -> Set[ChunkKeyT]:
        """The chunks of ``read`` the host has not heard of under this table."""
        return set(read - self.known)

    def saw(self, read: AbstractSet[ChunkKeyT]) -> bool:
        """The shims' counts show these chunks read since the last harvest: remember
        whether one is fresh.

        :returns: whether an early report is pending.
        """
        if not self.pending and (len(self.known) >= self.max_known or self.fresh(read)):
            self.pending = True
        return self.pending

    def due_at(self) -> float:
        """When the pending early report may go (inf: none pending)."""
        return self.last_report_t + self.min_gap_s if self.pending else float("inf")

    def may_report(self, now: float) -> bool:
        """Whether a report may go at ``now`` (early or periodic): ``min_gap_s`` since the
        last one."""
        return now >= self.last_report_t + self.min_gap_s
