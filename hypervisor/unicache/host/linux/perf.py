"""Per-thread performance counters through perf_event_open(2) (the only ctypes user).

For each vCPU thread unicache opens cycles, instructions, LLC references and LLC misses
(``PERF_TYPE_HARDWARE``) where the CPU exposes them, plus ``task-clock``
(``PERF_TYPE_SOFTWARE``) always. Where hardware events are not supported (this nested
machine), it says so once and records ``CounterSource.SOFTWARE`` in every sample: the
weight then comes from task-clock and the bytes the guest agent reported.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from unicache.errors import PerfError
from unicache.model import CounterSource

log = logging.getLogger(__name__)

# <linux/perf_event.h>
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_HW_CACHE_REFERENCES = 2
PERF_COUNT_HW_CACHE_MISSES = 3
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_FLAG_FD_CLOEXEC = 1 << 3
#: attr.flags bits: exclude_hv (bit 6) — guests' hypervisor time is not theirs
_FLAG_EXCLUDE_HV = 1 << 6
#: __NR_perf_event_open on x86_64
_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}.get(os.uname().machine, 298)
#: PERF_ATTR_SIZE_VER5; the rest of the structure stays zero
_ATTR_SIZE = 112

#: the hardware events, in the order a sample lists them
HARDWARE_EVENTS = (
    ("cycles", PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", PERF_COUNT_HW_INSTRUCTIONS),
    ("llc_references", PERF_COUNT_HW_CACHE_REFERENCES),
    ("llc_misses", PERF_COUNT_HW_CACHE_MISSES),
)


@dataclass(frozen=True, slots=True)
class ThreadCounts:
    """Cumulative counts of one thread since its counters were opened.

    :param source: hardware (all events) or software (task-clock only).
    :param task_clock_ns: CPU time the thread ran.
    :param cycles: cycles, if hardware counters exist.
    :param instructions: instructions, if hardware counters exist.
    :param llc_references: LLC references, if hardware counters exist.
    :param llc_misses: LLC misses, if hardware counters exist.
    """

    source: CounterSource
    task_clock_ns: int
    cycles: int | None = None
    instructions: int | None = None
    llc_references: int | None = None
    llc_misses: int | None = None

    def minus(self, earlier: ThreadCounts) -> ThreadCounts:
        """The counts accumulated since ``earlier``."""

        def diff(now: int | None, then: int | None) -> int | None:
            return None if now is None or then is None else max(now - then, 0)

        return ThreadCounts(
            self.source,
            max(self.task_clock_ns - earlier.task_clock_ns, 0),
            diff(self.cycles, earlier.cycles),
            diff(self.instructions, earlier.instructions),
            diff(self.llc_references, earlier.llc_references),
            diff(self.llc_misses, earlier.llc_misses),
        )



_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def perf_event_open(event_type: int, config: int, tid: int) -> int:
    """Open one counting event on one thread, on any CPU.

    :param event_type: ``PERF_TYPE_*``.
    :param config: the event within the type.
    :param tid: the thread (``0`` = the calling thread).
    :returns: the file descriptor.
    :raises PerfError: with the kernel's errno.
    """
    attr = bytearray(_ATTR_SIZE)
    # struct perf_event_attr: type u32, size u32, config u64, ..., flags u64 at offset 40
    struct.pack_into("=IIQ", attr, 0, event_type, _ATTR_SIZE, config)
    struct.pack_into("=Q", attr, 40, _FLAG_EXCLUDE_HV)
    buf = (ctypes.c_char * _ATTR_SIZE).from_buffer(attr)
    fd = _libc.syscall(_NR_PERF_EVENT_OPEN, buf, tid, -1, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise PerfError(err, os.strerror(err))
    return int(fd)


def _read_count(fd: int) -> int:
    data = os.read(fd, 8)
    return int(struct.unpack("=Q", data)[0]) if len(data) == 8 else 0


def hardware_counters_available() -> tuple[bool, str]:
    """Probe once whether hardware events can be counted on this machine.

    :returns: ``(available, why)`` — ``why`` is the one line shown to users.
    """
    try:
        fd = perf_event_open(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, 0)
    except PerfError as err:
        reason = {errno.ENOENT: "not supported by this CPU", errno.EOPNOTSUPP: "not supported"}
        why = reason.get(err.errno or 0, os.strerror(err.errno or 0))
        return False, (
            f"hardware perf counters {why} (perf_event_open: {os.strerror(err.errno or 0)}); "
            "using task-clock and guest-reported bytes as the cache-weight source"
        )
    os.close(fd)
    return True, "hardware perf counters available: cycles, instructions, LLC refs/misses"


class PerfCounters:
    """perf_event_open counters per thread, opened lazily, closed on ``forget``.

    :param hardware: count hardware events too (see :func:`hardware_counters_available`).
    """

    def __init__(self, hardware: bool) -> None:
        self.hardware = hardware
        self._fds: dict[int, dict[str, int]] = {}

    def _open(self, tid: int) -> dict[str, int]:
        fds: dict[str, int] = {}
        try:
            fds["task_clock"] = perf_event_open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, tid)
            if self.hardware:
                for name, config in HARDWARE_EVENTS:
                    fds[name] = perf_event_open(PERF_TYPE_HARDWARE, config, tid)
        except PerfError:
            for fd in fds.values():
                os.close(fd)
            raise
        return fds

    def read(self, tid: int) -> ThreadCounts | None:
        """Cumulative counts of ``tid``; ``None`` if the thread is gone.

        :raises PerfError: for failures other than a vanished thread.
        """
        fds = self._fds.get(tid)
        if fds is None:
            try:
                fds = self._fds[tid] = self._open(tid)
            except PerfError as err:
                if err.errno == errno.ESRCH:
                    return None
                raise
        values = {name: _read_count(fd) for name, fd in fds.items()}
        if not self.hardware:
            return ThreadCounts(CounterSource.SOFTWARE, values["task_clock"])
        return ThreadCounts(
            CounterSource.HARDWARE,
            values["task_clock"],
            values["cycles"],
            values["instructions"],
            values["llc_references"],
            values["llc_misses"],
        )

    def forget(self, tid: int) -> None:
        """Close the counters of a thread (it ended or left unicache's care)."""
        for fd in self._fds.pop(tid, {}).values():
            os.close(fd)

    def close(self) -> None:
        """Close every counter."""
        for tid in list(self._fds):
            self.forget(tid)

    @property
    def threads(self) -> Mapping[int, dict[str, int]]:
        """Threads with open counters (read-only view for status output)."""
        return dict(self._fds)

