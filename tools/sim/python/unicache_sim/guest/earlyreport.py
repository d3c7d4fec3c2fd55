"""The guest agent's early-report rule in the simulated guest (``unicache_agent.early``).

The agent is a guest program (stdlib Python 3.9, not installed on the host), so the
simulator carries its rule as this mirror, as :mod:`unicache_sim.guest.shimrule` carries the
shim's: besides the periodic report, the agent reports as soon as the shims counted
reads of a chunk that is neither in its table nor in a report sent since that table
arrived, at most one report per :data:`EARLY_REPORT_MIN_S`.
``tests/sim/test_early_rounds.py`` runs both on the same sequences and checks that they
agree, and that the constants are the agent's.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from unicache.model import ChunkId

#: least time between two reports of the agent (``unicache_agent.early``)
EARLY_REPORT_MIN_S = 0.1
#: chunks remembered per table (``unicache_agent.early.MAX_KNOWN_CHUNKS``)
MAX_KNOWN_CHUNKS = 1 << 17


class EarlyReports:
    """``unicache_agent.early.EarlyReports``, over the simulator's chunk ids.

    :param min_gap_s: least time between two reports.
    :param max_known: chunks remembered per table.
    """

    def __init__(
        self, min_gap_s: float = EARLY_REPORT_MIN_S, max_known: int = MAX_KNOWN_CHUNKS
    ) -> None:
        self.min_gap_s = min_gap_s
        self.max_known = max_known
        self.version = -1
        self.known: set[ChunkId] = set()
        self.last_report_t = float("-inf")
        self.pending = False

    def table(self, version: int, chunks: Iterable[ChunkId]) -> None:
        """A table arrived: what it holds is known, nothing reported before."""
        self.version = version
        self.known = set(chunks)
        if len(self.known) > self.max_known:
            self.known = set()

    def reported(self, chunks: Iterable[ChunkId], now: float) -> None:
        """A report went with these chunks at ``now``."""
        self.last_report_t = now
        self.pending = False
        for key in chunks:
            if len(self.known) >= self.max_known:
                break
            self.known.add(key)

    def saw(self, read: AbstractSet[ChunkId]) -> bool:
        """Chunks read since the last report: remember whether one is fresh.

        :returns: whether an early report is pending.
        """
        if not self.pending and (len(self.known) >= self.max_known or not read <= self.known):
            self.pending = True
        return self.pending

    def due_at(self) -> float:
        """When the pending early report may go (inf: none pending)."""
        return self.last_report_t + self.min_gap_s if self.pending else float("inf")
