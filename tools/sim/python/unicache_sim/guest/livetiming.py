"""The live loop's timing in the simulator: the daemon's round, the agent's report, the table.

The product runs one loop: every ``interval_s`` (``DaemonConfig``, 1 s by default) the
daemon decides on the reports the guest agents sent (each agent harvests its counters
every ``report_interval_s``, which the daemon sets to its own interval) and publishes
tables, which a guest applies a short channel hop later. Between those, an agent whose
shims count reads of a chunk the host has not heard of reports early (at most one report
per ``early_report_s``), and the daemon runs a round on a report naming a chunk no round
decided on (at most one per ``early_round_s``; ``unicache.roundpace``). ``unicache-sim``
runs exactly that loop on the simulated host by default: the same policy objects, the
same report shapes, the same tables, the same early rounds (the daemon's
:class:`~unicache.roundpace.RoundTrigger`, the agent's rule in
:mod:`unicache_sim.guest.earlyreport`), the shim's rule (``unicache_sim.guest.shimrule``) in
the guest.

Simulating every second of every interval line by line would take minutes per point, so
each interval is *sampled* (as SMARTS-style samplers do): after a table arrives the
guest's threads run for a window (``window_passes`` passes over the working set, at least
``min_window_s`` of reading summed over the guest's reader threads and
``min_window_bytes_per_reader`` read by each reader on average, at most the whole
interval), the agent's report of that window is
scaled to the whole interval (counts times ``interval / window``), and the next round
follows. For a stationary workload the caches and the policy's input are what the
whole interval would give; ``tests/sim/test_live_sampling.py`` checks that sampled and
unsampled runs agree on points where both can be run. ``window_passes = inf`` turns the
sampling off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from unicache_sim.guest.earlyreport import EARLY_REPORT_MIN_S


@dataclass(frozen=True, slots=True)
class LoopTiming:
    """When the product's loop acts, and how the simulator samples it.

    :param round_s: the daemon's round period (``DaemonConfig.interval_s``).
    :param report_s: the agent's report interval (the daemon sets it to its round period).
    :param table_delay_s: from the daemon's publish to the table in the guest's shared
        memory (one channel message and the agent's atomic swap; an estimate until
        ``unicache bench live`` measures it).
    :param window_passes: a sampled interval lasts this many passes over the working set.
    :param min_window_s: a sampled interval holds at least this much reading, summed over
        the guest's reader threads (simulated seconds; :meth:`min_window_per_thread`).
    :param min_window_bytes_per_reader: ... and at least this many bytes per reader
        (:meth:`window_bytes`).
    :param early_report_s: least time between two of the agent's reports (an early report
        follows the read of a fresh chunk; ``unicache_agent.early``).
    :param early_round_s: least time between a round and an early one
        (``unicache.roundpace.EARLY_ROUND_MIN_S``). A sampled interval shorter than this
        has no early round: it stands for a whole interval of steady reading.
    """

    round_s: float = 1.0
    report_s: float = 1.0
    table_delay_s: float = 0.001
    window_passes: float = 4.0
    min_window_s: float = 0.01
    #: 64 of MFC §6.1's 256 KiB files: a reader's cache weight over fewer reads is noise
    #: that the real round's second of reading never has (each read of the benchmark hits
    #: or misses whole, so the weight's relative error is about 1/sqrt(reads): 13 % at
    #: 64, 45 % at the 5 reads each of 16 readers read in a shared 10 ms, where OBS-X moved
    #: vCPUs for an imbalance that was not there, ``--threads 16 --seed 5``: 0.95x)
    min_window_bytes_per_reader: float = 64 * 256 * 1024
    early_report_s: float = EARLY_REPORT_MIN_S
    early_round_s: float = 0.1

    @classmethod
    def daemon_defaults(cls, **overrides: float) -> LoopTiming:
        """The timing of a daemon started without a config file (``unicache run``)."""
        from unicache.config import DaemonConfig
        from unicache.roundpace import EARLY_ROUND_MIN_S

        interval = DaemonConfig().interval_s
        # daemon.py: the agent is told to report every max(interval_s, 0.1) seconds
        daemon = cls(round_s=interval, report_s=max(interval, 0.1),
                     early_round_s=EARLY_ROUND_MIN_S)
        return replace(daemon, **overrides)

    @property
    def sampled(self) -> bool:
        """Whether intervals are sampled (``window_passes`` finite)."""
        return math.isfinite(self.window_passes)

    def min_window_per_thread(self, readers: int) -> float:
        """How long a sampled interval lasts at least, in each reader's time (seconds).

        The floor is a quantity of reading, not of time: one reader reads for
        ``min_window_s``, sixteen parallel readers for a sixteenth of it each, so that
        the report holds as many reads whatever the thread count. A floor in each
        thread's time made a window of 128 readers simulate 128 times the reads of one
        reader's (1,238 s for one ``epyc-2s`` point with every CPU reading).
        """
        return self.min_window_s / max(1, readers)

    def window_bytes(self, ws_bytes: int, readers: int = 1) -> float:
        """Bytes the guest reads in one sampled interval, at least (inf: the whole
        interval): ``window_passes`` passes over the working set, and
        ``min_window_bytes_per_reader`` per reader."""
        if not self.sampled:
            return math.inf
        return max(self.window_passes * ws_bytes, readers * self.min_window_bytes_per_reader)

