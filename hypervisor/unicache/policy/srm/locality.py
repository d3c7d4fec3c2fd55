"""Which files a guest streams (weak locality) and which it reads again.

unicache's own filter over guest reports, not the SRM paper's (SRM-buffer groups every
sequence, §3.2): the paper's problem is weak-locality buffer data polluting the LLC (§2),
so the per-VM adapter (:mod:`unicache.policy.srm.colors`) colors only the streams this
filter finds. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from unicache.model import GuestReport


@dataclass(frozen=True, slots=True)
class WeakLocality:
    """Result of :func:`detect_weak_locality`.

    :param weak: ``(vm, file id)`` of streaming files.
    :param strong: ``(vm, file id)`` of files with re-read chunks.
    :param seen: ``(vm, file id, chunk index, bytes read)`` of this interval, for the next
        call.
    """

    weak: frozenset[tuple[str, int]]
    strong: frozenset[tuple[str, int]]
    seen: frozenset[tuple[str, int, int, int]] = field(default_factory=frozenset)


def detect_weak_locality(
    reports: Iterable[GuestReport],
    chunk_size: int,
    previous: frozenset[tuple[str, int, int, int]] = frozenset(),
) -> WeakLocality:
    """Classify the files of guest reports by locality (unicache's sequence filter).

    1. A chunk read more than once in the interval (``bytes_read > chunk_size``) is reuse.
    2. A chunk read in this interval and also in the previous one is reuse, unless the
       stream only crossed the interval boundary inside it: it is the last chunk of its
       file read before and the first read now, the two reads add up to at most the chunk,
       and the file's read goes on past it (the chunk before it read before, or the chunk
       after it read now). With 1 MiB chunks read 512 KiB at a time that is most chunks
       of a stream; a small file read whole in each interval stays reuse.
    3. A file with any reused chunk has strong locality; the others are streaming.

    :param reports: the guest reports of one interval.
    :param chunk_size: bytes per chunk.
    :param previous: ``seen`` of the previous call.
    :returns: the classification and this interval's ``seen``.
    """
    weak: set[tuple[str, int]] = set()
    strong: set[tuple[str, int]] = set()
    before = {(vm, fid, index): nbytes for vm, fid, index, nbytes in previous}
    read: dict[tuple[str, int, int], int] = {}
    for report in reports:
        for access in report.chunks:
            if access.bytes_read > 0:
                where = (report.vm, access.chunk.file_id, access.chunk.index)
                read[where] = read.get(where, 0) + access.bytes_read
    last_before = _extreme(before, max)
    first_now = _extreme(read, min)
    for (vm, fid, index), nbytes in read.items():
        key = (vm, fid)
        crossed = (
            last_before.get(key) == index == first_now.get(key)
            and nbytes + before[(vm, fid, index)] <= chunk_size
            and ((vm, fid, index - 1) in before or (vm, fid, index + 1) in read)
        )
        if nbytes > chunk_size or ((vm, fid, index) in before and not crossed):
            strong.add(key)
        else:
            weak.add(key)
    seen = frozenset((*where, nbytes) for where, nbytes in read.items())
    return WeakLocality(frozenset(weak - strong), frozenset(strong), seen)


def _extreme(
    chunks: dict[tuple[str, int, int], int], pick: Callable[[int, int], int]
) -> dict[tuple[str, int], int]:
    """The lowest or highest chunk index read of each ``(vm, file id)``."""
    out: dict[tuple[str, int], int] = {}
    for vm, fid, index in chunks:
        key = (vm, fid)
        out[key] = pick(out[key], index) if key in out else index
    return out
