"""OBS's cache weight of a vCPU: LLC misses per cycle, or, without LLC counters, the lines
its guest reported reading per nanosecond it ran, capped at what a core can read.

The observations paper ("Policy: Reducing cache interference"): "cache misses per cycle are
the best indication of cache interference", from "the metrics from the immediately past
quantum". Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from unicache.model import CounterSample, CounterSource

#: the most bytes a vCPU can read per nanosecond it ran: two 64-byte loads a cycle (the
#: L1 bandwidth of AVX-512 cores) at 3 GHz. A guest's reported bytes are capped at this
#: times its task clock, so a forged count weighs no more than a core can read
MAX_GUEST_BYTES_PER_NS = 384


@dataclass(frozen=True, slots=True)
class CacheWeight:
    """A vCPU's cache weight and where it came from.

    :param value: LLC misses per cycle (or its software estimate).
    :param source: the counter source that produced it.
    """

    value: float
    source: CounterSource


def cache_weight(sample: CounterSample, line_size: int = 64) -> CacheWeight:
    """The OBS cache weight of one vCPU for the last interval.

    With hardware counters: LLC misses per cycle ("cache misses per cycle are the best
    indication of cache interference"). Without them (software source): the lines the
    guest reported reading per nanosecond of CPU time the vCPU ran (task-clock) — every
    line a guest reads through its page cache is one the cache had to take in. The two
    scales differ; a host has one source for all its vCPUs, and the source is recorded.

    :param sample: the vCPU's counter sample.
    :param line_size: bytes per cache line.
    :returns: the weight; 0 when the sample has neither misses nor guest bytes.
    """
    if host_measured(sample):
        assert sample.llc_misses is not None and sample.cycles
        return CacheWeight(sample.llc_misses / sample.cycles, sample.source)
    if sample.guest_bytes is not None:
        ran = sample.task_clock_ns or sample.cycles
        if ran:
            # the guest says what it read: no more than a core can read in the time it ran
            nbytes = min(max(sample.guest_bytes, 0), ran * MAX_GUEST_BYTES_PER_NS)
            return CacheWeight(nbytes / line_size / ran, sample.source)
    return CacheWeight(0.0, sample.source)


def host_measured(sample: CounterSample) -> bool:
    """Whether the sample's weight is the host's own measurement (LLC misses per cycle),
    not the guest's word (its reported bytes): only those may move another VM's vCPUs."""
    return sample.llc_misses is not None and bool(sample.cycles)
