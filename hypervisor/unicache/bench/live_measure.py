"""What ``unicache bench live`` measures on the host: a process's CPU and RSS, clocks, bytes.

* :class:`ProcSampler`: a thread reading ``/proc/PID/stat`` (utime + stime) and
  ``/proc/PID/status`` (VmRSS) every :data:`SAMPLE_S`, on this host's monotonic clock;
  :func:`cpu_percent` gives the share of one core over a window from the samples;
* :func:`estimate_offset`: the guest's ``CLOCK_BOOTTIME`` against this host's
  ``CLOCK_MONOTONIC``, NTP-style over the guest's command runner (host t0, guest t1 from a
  ping, host t2: offset = t1 - (t0 + t2) / 2, within (t2 - t0) / 2 plus the 10 ms steps of
  ``/proc/uptime``; the tightest of several pings);
* :func:`channel_bytes`: the daemon's ``unicache_channel_bytes`` metric, read from its
  ``/metrics`` (every VM's bytes in and out since it started).
"""

from __future__ import annotations

import math
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from unicache.errors import BenchError

#: seconds between samples of the daemon's /proc files
SAMPLE_S = 0.5
#: /proc/uptime's step (two decimals): the guest's answer is up to this much early
UPTIME_STEP_S = 0.01
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One sample of a process.

    :param t: this host's ``time.monotonic()``.
    :param cpu_s: its user + system CPU time so far, seconds (steps of 1/CLK_TCK).
    :param rss_mib: its resident memory.
    """

    t: float
    cpu_s: float
    rss_mib: float


def read_proc(pid: int) -> ProcSample:
    """Sample ``pid`` now.

    :raises OSError: when it is gone (or exited, a zombie its parent has not reaped).
    """
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        raise ProcessLookupError(pid, "exited")
    # fields[0] is field 3 (state): utime, stime are fields 14, 15; rss (pages) field 24
    cpu = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return ProcSample(time.monotonic(), cpu, int(fields[21]) * _PAGE / (1 << 20))


class ProcSampler:
    """Samples a process every :data:`SAMPLE_S` in a thread until :meth:`stop`.

    :param pid: the process.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[ProcSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sample-{pid}", daemon=True)

    def start(self) -> None:
        """Start sampling."""
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.samples.append(read_proc(self.pid))
            except OSError:
                return  # the process ended
            if self._stop.wait(SAMPLE_S):
                return

    def stop(self) -> list[ProcSample]:
        """Stop sampling; the samples."""
        self._stop.set()
        self._thread.join()
        return list(self.samples)


def cpu_percent(samples: Sequence[ProcSample], start: float, end: float) -> float:
    """Percent of one core the process used between the first sample at or after ``start``
    and the last at or before ``end`` (0 with fewer than two such samples)."""
    inside = [s for s in samples if start <= s.t <= end]
    if len(inside) < 2 or inside[-1].t <= inside[0].t:
        return 0.0
    return 100.0 * (inside[-1].cpu_s - inside[0].cpu_s) / (inside[-1].t - inside[0].t)


def series(samples: Sequence[ProcSample],
           window_s: float = 2.0) -> list[tuple[float, float, float]]:
    """(t, CPU % over the last ``window_s``, RSS MiB) per sample, for the plot (CPU time
    comes in 1/CLK_TCK steps, so a window of a few samples smooths the steps)."""
    out = []
    for i, s in enumerate(samples):
        j = i
        while j > 0 and s.t - samples[j - 1].t <= window_s:
            j -= 1
        first = samples[j]
        pct = 100.0 * (s.cpu_s - first.cpu_s) / (s.t - first.t) if s.t > first.t else 0.0
        out.append((s.t, pct, s.rss_mib))
    return out


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """The guest's clock against the host's: ``guest = host + offset_s``.

    :param offset_s: guest ``CLOCK_BOOTTIME`` minus host ``time.monotonic()``.
    :param uncertainty_s: the error bound of the offset (half the ping's round trip plus
        ``/proc/uptime``'s step).
    :param pings: pings it is the tightest of.
    """

    offset_s: float
    uncertainty_s: float
    pings: int

    def to_guest(self, host_t: float) -> float:
        """A host monotonic time on the guest's clock."""
        return host_t + self.offset_s

    def to_host(self, guest_t: float) -> float:
        """A guest boottime on the host's monotonic clock."""
        return guest_t - self.offset_s


def estimate_offset(ping: Callable[[], float | None], pings: int = 15) -> ClockOffset:
    """The offset of the guest's clock, NTP-style, from the tightest of ``pings`` pings.

    :param ping: asks the guest for its ``/proc/uptime`` (``None``: no answer).
    :raises BenchError: when no ping is answered.
    """
    best: ClockOffset | None = None
    for _ in range(pings):
        t0 = time.monotonic()
        up = ping()
        t2 = time.monotonic()
        if up is None:
            continue
        # /proc/uptime is cut to its step: the guest's true time lies in [up, up + step)
        guest = up + UPTIME_STEP_S / 2
        bound = (t2 - t0) / 2 + UPTIME_STEP_S / 2
        if best is None or bound < best.uncertainty_s:
            best = ClockOffset(guest - (t0 + t2) / 2, bound, pings)
    if best is None:
        raise BenchError("the guest answered no ping")
    return best


def realtime_to_monotonic() -> float:
    """What to add to this host's ``time.time()`` to get its ``time.monotonic()`` (the
    daemon stamps its records with the first)."""
    return time.monotonic() - time.time()


def channel_bytes(port: int, timeout: float = 10.0) -> tuple[int, int]:
    """Every VM's channel bytes (in, out) since the daemon started, from its metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        text = resp.read().decode()
    total = {"in": 0.0, "out": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name != "unicache_channel_bytes":
            continue
        for sample in family.samples:
            direction = sample.labels.get("direction", "")
            if direction in total:
                total[direction] += sample.value
    return int(total["in"]), int(total["out"])


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``values``; ``inf`` counts as above
    every value (a trial that never saw its entry)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
