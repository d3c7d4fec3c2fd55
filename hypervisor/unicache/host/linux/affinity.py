"""vCPU thread affinity through sched_setaffinity(2), with a memory: every change can be undone.

Every change unicache makes to a thread's affinity goes through :class:`Actuator` (CPU
weights go through :mod:`unicache.host.linux.cgroup`, with a journal of their own). Before
changing anything it records the original value in a journal on disk (written atomically),
so that a clean shutdown, a SIGTERM or, after a crash, the next start restores exactly
what was there. A journal entry names the thread by tid *and* its start time, so a
recycled tid is never "restored".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from unicache.statefile import Checkpoint

log = logging.getLogger(__name__)

#: journal format version
JOURNAL_VERSION = 1


@dataclass(frozen=True, slots=True)
class SavedAffinity:
    """The affinity a thread had before unicache first changed it.

    :param key: ``affinity/VM/vcpuN``.
    :param tid: the thread.
    :param start_time: the thread's start time (``/proc/TID/stat`` field 22).
    :param cpus: its original CPU set.
    """

    key: str
    tid: int
    start_time: int
    cpus: tuple[int, ...]


def _stat_fields(tid: int) -> list[str] | None:
    """``/proc/TID/stat`` from field 3 on, or ``None`` if the thread is gone."""
    try:
        stat = Path(f"/proc/{tid}/stat").read_text()
    except OSError:
        return None
    # comm may hold spaces and parentheses: split after the last ')'
    return stat[stat.rfind(")") + 2 :].split()


def thread_start_time(tid: int) -> int | None:
    """Start time of a thread in clock ticks since boot, or ``None`` if it is gone."""
    fields = _stat_fields(tid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def thread_last_cpu(tid: int) -> int | None:
    """The CPU a thread last ran on (field 39, ``processor``), or ``None`` if it is gone."""
    fields = _stat_fields(tid)
    return int(fields[36]) if fields and len(fields) > 36 else None


class Actuator:
    """Applies affinity changes, journaling the original values first.

    :param journal: the journal file (its directory is created).
    :param dry_run: compute and journal nothing, change nothing; return what would be set.
    """

    def __init__(self, journal: Path, dry_run: bool = False) -> None:
        self.journal = journal
        self.dry_run = dry_run
        self._checkpoint = Checkpoint(journal, "affinity-journal", JOURNAL_VERSION,
                                      legacy_version=JOURNAL_VERSION)
        self._saved: dict[str, SavedAffinity] = self._load()
        self._last: dict[str, frozenset[int]] = {}

    # --- journal --------------------------------------------------------------------------

    def _load(self) -> dict[str, SavedAffinity]:
        data = self._checkpoint.load()
        if data is None:
            return {}
        return {
            e["key"]: SavedAffinity(e["key"], e["tid"], e["start_time"], tuple(e["cpus"]))
            for e in data.get("affinity", [])
        }

    def _store(self) -> None:
        payload = {
            "version": JOURNAL_VERSION,
            "affinity": [asdict(e) for e in sorted(self._saved.values(), key=lambda e: e.key)],
        }
        self._checkpoint.save(payload)

    @property
    def pending(self) -> tuple[SavedAffinity, ...]:
        """Changes that a restore would undo."""
        return tuple(self._saved.values())

    # --- writes ---------------------------------------------------------------------------

    def set_affinity(self, key: str, tid: int, cpus: Iterable[int]) -> frozenset[int]:
        """Pin a thread, journaling its original affinity the first time.

        Skips the write when the same set was applied last (reconciler memory).

        :param key: ``affinity/VM/vcpuN``.
        :param tid: the thread.
        :param cpus: the CPUs.
        :returns: the CPU set written (or that would be, with ``dry_run``).
        :raises OSError: if the thread is gone or the set is invalid.
        """
        wanted = frozenset(cpus)
        if tid <= 0:
            # 0 would be the calling thread: a vCPU without a host thread is its backend's
            raise ProcessLookupError(f"{key}: no host thread to pin")
        if self.dry_run or self._last.get(key) == wanted:
            return wanted
        saved = self._saved.get(key)
        if saved is None or saved.tid != tid:
            start = thread_start_time(tid)
            if start is None:
                raise ProcessLookupError(f"thread {tid} is gone")
            original = tuple(sorted(os.sched_getaffinity(tid)))
            self._saved[key] = SavedAffinity(key, tid, start, original)
            self._store()  # saved before the write: a crash now still restores
        os.sched_setaffinity(tid, wanted)
        self._last[key] = wanted
        return wanted

    def forget(self, key: str) -> None:
        """Drop a journal entry without restoring (its thread ended)."""
        self._last.pop(key, None)
        if self._saved.pop(key, None) is not None:
            self._store()

    def restore(self, key: str) -> str:
        """Put one journaled thread back as it was (a policy released its pin).

        :param key: ``affinity/VM/vcpuN``.
        :returns: one line saying what was done (nothing, when it was never pinned).
        :raises OSError: when the write is refused (the entry stays; the round retries).
        """
        entry = self._saved.get(key)
        if entry is None:
            return f"release: {key}: never pinned, nothing to do"
        if self.dry_run:
            return f"release: {key}: would go back on cpus {entry.cpus}"
        line = f"release: {key}: thread {entry.tid} is gone, nothing to do"
        if thread_start_time(entry.tid) == entry.start_time:
            os.sched_setaffinity(entry.tid, entry.cpus)
            line = f"release: {key}: thread {entry.tid} back on cpus {entry.cpus}"
        self.forget(key)
        return line

    def restore_all(self) -> list[str]:
        """Put every journaled thread back as it was, and empty the journal.

        With ``dry_run``: one line per thread that would go back, nothing set (a journal a
        crashed run left stays for the next run that may change the host).

        :returns: one line per entry saying what was done.
        """
        if self.dry_run:
            return [f"restore: {e.key}: thread {e.tid} would go back on cpus {e.cpus}"
                    for e in sorted(self._saved.values(), key=lambda e: e.key)]
        lines = []
        for entry in sorted(self._saved.values(), key=lambda e: e.key):
            if thread_start_time(entry.tid) != entry.start_time:
                lines.append(f"restore: {entry.key}: thread {entry.tid} is gone, nothing to do")
                continue
            try:
                os.sched_setaffinity(entry.tid, entry.cpus)
            except OSError as err:
                lines.append(f"restore: {entry.key}: failed: {err.strerror}")
                continue
            lines.append(f"restore: {entry.key}: thread {entry.tid} back on cpus {entry.cpus}")
        self._saved.clear()
        self._last.clear()
        self._store()
        return lines
