"""Which files a guest streams (weak locality) and which it reads again.

unicache's own filter over guest reports, not the SRM paper's (SRM-buffer groups every
sequence, §3.2): the paper's problem is weak-locality buffer data polluting the LLC (§2),
so the per-VM adapter (:mod:`unicache.policy.colors`) colors only the streams this
filter finds. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from unicache.model import GuestReport


@dataclass(frozen=True, slots=True)
class WeakLocality:
    """Result of :func:`detect_weak_locality`.

    :param weak: ``(vm, file id)`` of streaming files.
    :param strong: ``(vm, file id)`` of files with re-read chunks.
    :param seen: ``(vm, file id, chunk index)`` read this interval, for the next call.
    """

    weak: frozenset[tuple[str, int]]
    strong: frozenset[tuple[str, int]]
    seen: frozenset[tuple[str, int, int]] = field(default_factory=frozenset)


def detect_weak_locality(
    reports: Iterable[GuestReport],
    chunk_size: int,
    previous: frozenset[tuple[str, int, int]] = frozenset(),
) -> WeakLocality:
    """Classify the files of guest reports by locality (unicache's sequence filter).

    1. A chunk read more than once in the interval (``bytes_read > chunk_size``) is reuse.
    2. A chunk read in this interval and also in the previous one is reuse.
    3. A file with any reused chunk has strong locality; the others are streaming.

    :param reports: the guest reports of one interval.
    :param chunk_size: bytes per chunk.
    :param previous: ``seen`` of the previous call.
    :returns: the classification and this interval's ``seen``.
    """
    weak: set[tuple[str, int]] = set()
    strong: set[tuple[str, int]] = set()
    seen: set[tuple[str, int, int]] = set()
    for report in reports:
        for access in report.chunks:
            if access.bytes_read <= 0:
                continue
            key = (report.vm, access.chunk.file_id)
            where = (report.vm, access.chunk.file_id, access.chunk.index)
            seen.add(where)
            if access.bytes_read > chunk_size or where in previous:
                strong.add(key)
            else:
                weak.add(key)
    return WeakLocality(frozenset(weak - strong), frozenset(strong), frozenset(seen))
