"""perf_event_open on real threads: hardware where it exists, task-clock always."""

from __future__ import annotations

import subprocess
import time

from unicache.host.linux.perf import PerfCounters, hardware_counters_available
from unicache.model import CounterSource


def test_task_clock_of_a_busy_thread_grows_and_the_source_matches_the_probe() -> None:
    hardware, why = hardware_counters_available()
    assert why  # one line for users either way
    proc = subprocess.Popen(["python3", "-c", "while True: pass"])
    perf = PerfCounters(hardware)
    try:
        first = perf.read(proc.pid)
        time.sleep(1.0)
        second = perf.read(proc.pid)
        assert first is not None and second is not None
        delta = second.minus(first)
        assert delta.task_clock_ns > 10_000_000  # ran (even on a loaded 2-core machine)
        if hardware:
            assert delta.source is CounterSource.HARDWARE and delta.cycles
        else:
            assert delta.source is CounterSource.SOFTWARE
            assert delta.cycles is None and delta.llc_misses is None  # never faked
    finally:
        proc.kill()
        proc.wait()
        perf.close()


def test_a_vanished_thread_reads_as_none() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert PerfCounters(False).read(proc.pid) is None
