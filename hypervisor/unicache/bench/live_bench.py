"""``unicache bench live``: what the daemon and the guest agent cost with real guests reading.

Real guests (the project's image, QEMU; TCG on a host without usable KVM) under the real
daemon (``unicache run`` as :mod:`unicache_sim.density.live_daemon` runs it, with its
default interval of one round a second, and ``--metrics-port``). In order:

1. **boot** ``guests`` guests (2 vCPUs, 512 MiB) and **prepare** in each
   :data:`BUSY_FILES` hot files and one new file per trial (:func:`file_bytes`: one chunk
   each, 3/8 of an L2 unit), page-cached;
2. **clocks**: each guest's ``CLOCK_BOOTTIME`` against this host's ``CLOCK_MONOTONIC``
   (:func:`live_measure.estimate_offset`, NTP-style over the guest's command runner);
3. **daemon** started; a sampler thread reads its ``/proc/PID/stat`` and RSS every
   0.5 s until it stops; a **warm-up** read until every guest has reported reads;
4. **steady**: in every guest a reader under the shim reads the busy files in turn for
   ``seconds`` (a busy guest); the daemon's CPU (percent of one core) over that window,
   its RSS, each guest agent's CPU (from ``/proc/<agent pid>/stat`` read in the guest, as
   percent of one vCPU) and the channel's bytes per second (the daemon's
   ``unicache_channel_bytes`` before and after the window);
5. **trials**: in every guest, ``trials`` times, a reader starts reading a file nobody
   read before; the **reaction** is the time from its first read to the guest's shared
   table holding the file's entry. Both events happen in the guest and are taken on its
   clock (``live_guest.py``: exact to the table poll, :data:`POLL_S` plus one lookup).
   The daemon's publish record of the table that first holds the entry (host
   ``time.time()``) is placed on the guest's clock with the offset of step 2, splitting
   the reaction into *read to publish* (agent report interval, channel, the daemon's
   round) and *publish to table* (channel, agent), each within the offset's bound;
6. the daemon stopped (SIGTERM, must exit 0), the guests stopped.

The daemon runs with ``--unify l2 --always-place`` by default (``make demo``'s flags:
the path that places and publishes tables, the only one that reacts to a new hot file
on a host with one LLC group); ``always_place=False`` runs it as an operator does (its
cost models on: on such a host it leaves the guests alone and no trial sees an entry).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicache.bench import live_measure
from unicache.policy.scu.options import scu_options_for
from unicache.topology import Unify
from unicache.topology.sysfs import discover_topology

#: the guest program (read as text, run by the guest's python3)
GUEST_PROGRAM = Path(__file__).with_name("live_guest.py")
#: the image's agent package and shim
AGENT_LIB = "/usr/lib/unicache-agent"
SHIM = f"{AGENT_LIB}/libunicache.so"
#: where a guest keeps the bench's files
DATA_DIR = "/var/tmp/unicache-bench"
#: files the busy reader reads in turn
BUSY_FILES = 3
#: seconds between the trial's lookups of the guest's table
POLL_S = 0.005
#: seconds a trial waits for its entry before it counts as missed
TRIAL_TIMEOUT_S = 30.0
#: seconds of reading before the daemon must have seen every guest's reports
WARM_S = 4.0
#: each guest (small: a 2-core host under TCG)
GUEST_VCPUS = 2
GUEST_MEMORY_MIB = 512
#: acceptance of issue 19: the daemon's CPU with one busy guest, and the reaction
DAEMON_CPU_GOAL_PCT = 1.0
REACTION_P95_GOAL_MS = 500.0
#: the steps the progress callback is told about
STEPS = ("boot", "prepare", "clocks", "daemon", "warm-up", "steady", "trials", "stop")


def file_bytes() -> int:
    """Bytes of each file: one chunk (the daemon's, from this host's L2 with ``--unify
    l2``) and 3/8 of an L2 unit, page-aligned (as tests/integration/test_daemon_vm.py)."""
    topo = discover_topology()
    unit = topo.units(Unify.L2)[0].capacity_bytes
    return min(3 * unit // 8, scu_options_for(topo, Unify.L2).chunk_size) // 4096 * 4096


@dataclass(frozen=True, slots=True)
class Trial:
    """One reaction trial.

    :param guest: the guest.
    :param file: the file's id (hex, as the decision log writes it).
    :param reaction_ms: first read to entry in the table, on the guest's clock (``None``:
        no entry within :data:`TRIAL_TIMEOUT_S`).
    :param to_publish_ms: first read to the daemon's publish record (``None``: none).
    :param publish_to_table_ms: that record to the entry in the table.
    :param caching: whether the entry the guest saw first was a caching one.
    """

    guest: str
    file: str
    reaction_ms: float | None
    to_publish_ms: float | None
    publish_to_table_ms: float | None
    caching: bool


@dataclass(frozen=True, slots=True)
class LiveBenchResult:
    """One ``bench live`` run.

    :param guests: guests.
    :param interval_s: the daemon's round interval.
    :param daemon_command: how the daemon ran.
    :param accel: QEMU's accelerator and why.
    :param seconds: the steady window asked for.
    :param window_s: the steady window measured (the guests' readers, on the host's clock).
    :param daemon_cpu_pct: the daemon's CPU over the window, percent of one core.
    :param daemon_cpu_all_pct: the same over the whole run (trials included).
    :param daemon_rss_mib: its RSS at the window's end.
    :param daemon_rss_peak_mib: its largest RSS sampled.
    :param agent_cpu_pct: per guest, its agent's CPU over the window, percent of one vCPU.
    :param channel_in_bps: bytes per second from the guests over the window, all guests.
    :param channel_out_bps: bytes per second to the guests.
    :param trials_channel_bps: bytes per second (in, out) during the trials (new files:
        new reports and tables).
    :param reads_per_s: the busy readers' reads per second, all guests.
    :param trials: the reaction trials.
    :param clock_bound_ms: the largest offset bound of the guests' clocks (the error of
        the reaction's split, not of the reaction).
    :param poll_ms: the table poll's period plus one lookup (the reaction's error).
    :param load: this host's load averages (1 min) at the start and the end.
    :param samples: (t from the daemon's start s, CPU %, RSS MiB) per sample.
    :param steady_from_s: the window's start, seconds from the daemon's start.
    :param daemon_exit: the daemon's exit status after SIGTERM.
    """

    guests: int
    interval_s: float
    daemon_command: str
    accel: str
    seconds: float
    window_s: float
    daemon_cpu_pct: float
    daemon_cpu_all_pct: float
    daemon_rss_mib: float
    daemon_rss_peak_mib: float
    agent_cpu_pct: tuple[float, ...]
    channel_in_bps: float
    channel_out_bps: float
    trials_channel_bps: tuple[float, float]
    reads_per_s: float
    trials: tuple[Trial, ...]
    clock_bound_ms: float
    poll_ms: float
    load: tuple[float, float]
    samples: tuple[tuple[float, float, float], ...]
    steady_from_s: float
    daemon_exit: int

    def reaction(self, q: float) -> float | None:
        """The nearest-rank ``q`` quantile of the reaction, ms (a missed trial counts as
        above every other; ``None`` when the quantile is a missed trial or no trial ran)."""
        if not self.trials:
            return None
        values = [t.reaction_ms if t.reaction_ms is not None else float("inf")
                  for t in self.trials]
        value = live_measure.nearest_rank(values, q)
        return None if value == float("inf") else float(value)

    @property
    def missed(self) -> int:
        """Trials that saw no entry in time."""
        return sum(1 for t in self.trials if t.reaction_ms is None)

    def split_median(self) -> tuple[float | None, float | None]:
        """Medians of read-to-publish and publish-to-table over the trials that have them."""
        a = [t.to_publish_ms for t in self.trials if t.to_publish_ms is not None]
        b = [t.publish_to_table_ms for t in self.trials if t.publish_to_table_ms is not None]
        return (statistics.median(a) if a else None, statistics.median(b) if b else None)

    def as_json(self) -> dict[str, Any]:
        """The JSON ``unicache bench live --json`` prints."""
        to_publish, to_table = self.split_median()
        return {
            "guests": self.guests, "interval_s": self.interval_s,
            "daemon_command": self.daemon_command, "accel": self.accel,
            "seconds": self.seconds, "window_s": round(self.window_s, 2),
            "daemon_cpu_pct": round(self.daemon_cpu_pct, 3),
            "daemon_cpu_all_pct": round(self.daemon_cpu_all_pct, 3),
            "daemon_rss_mib": round(self.daemon_rss_mib, 1),
            "daemon_rss_peak_mib": round(self.daemon_rss_peak_mib, 1),
            "agent_cpu_pct": [round(x, 3) for x in self.agent_cpu_pct],
            "channel_in_bps": round(self.channel_in_bps, 1),
            "channel_out_bps": round(self.channel_out_bps, 1),
            "trials_channel_in_bps": round(self.trials_channel_bps[0], 1),
            "trials_channel_out_bps": round(self.trials_channel_bps[1], 1),
            "reads_per_s": round(self.reads_per_s, 1),
            "reaction_p50_ms": _round(self.reaction(0.5)),
            "reaction_p95_ms": _round(self.reaction(0.95)),
            "reaction_missed": self.missed,
            "to_publish_p50_ms": _round(to_publish),
            "publish_to_table_p50_ms": _round(to_table),
            "clock_bound_ms": round(self.clock_bound_ms, 2), "poll_ms": round(self.poll_ms, 2),
            "trials": [{"guest": t.guest, "file": t.file, "reaction_ms": _round(t.reaction_ms),
                        "to_publish_ms": _round(t.to_publish_ms),
                        "publish_to_table_ms": _round(t.publish_to_table_ms),
                        "caching": t.caching} for t in self.trials],
            "load": list(self.load), "steady_from_s": round(self.steady_from_s, 2),
            "samples": [[round(t, 2), round(c, 2), round(r, 1)] for t, c, r in self.samples],
            "daemon_exit": self.daemon_exit,
            "goals": {"daemon_cpu_pct": DAEMON_CPU_GOAL_PCT,
                      "reaction_p95_ms": REACTION_P95_GOAL_MS},
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def plot(result: LiveBenchResult, path: Path) -> None:
    """The daemon's CPU (percent of one core) and RSS over the run, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, cpu_ax = plt.subplots(figsize=(9, 4))
    ts = [s[0] for s in result.samples]
    cpu_ax.plot(ts, [s[1] for s in result.samples], color="tab:blue", lw=1,
                label="daemon CPU, % of one core (2 s window)")
    cpu_ax.axhline(DAEMON_CPU_GOAL_PCT, color="tab:blue", ls=":", lw=0.8)
    cpu_ax.set_xlabel("seconds since the daemon started")
    cpu_ax.set_ylabel("CPU, % of one core")
    rss_ax = cpu_ax.twinx()
    rss_ax.plot(ts, [s[2] for s in result.samples], color="tab:red", lw=1, label="RSS, MiB")
    rss_ax.set_ylabel("RSS, MiB")
    rss_ax.set_ylim(bottom=0)
    cpu_ax.axvspan(result.steady_from_s, result.steady_from_s + result.window_s, alpha=0.12,
                   color="green", label="steady window")
    lines = cpu_ax.get_legend_handles_labels()
    more = rss_ax.get_legend_handles_labels()
    cpu_ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper right")
    fig.suptitle(f"unicache daemon, {result.guests} busy guest(s), interval "
                 f"{result.interval_s:g} s: {result.daemon_cpu_pct:.2f} % of one core in the "
                 f"steady window")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
