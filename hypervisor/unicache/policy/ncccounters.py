"""NCC's remote-read counters during one round: the state's sorted tuple and the round's changes.

A guest's counters (:class:`~unicache.policy.ncc.RemoteCount`, up to
``MAX_COUNTERS_PER_VM`` a VM) outlive most rounds unchanged: a round reads a few chunks and
counts a few of them. So :func:`~unicache.policy.ncc.ncc_round` does not copy them into a
map every round: a counter is looked up in the state's tuple (sorted by chunk, then node)
by bisection, and what the round changes is kept aside, by chunk then node. The new tuple
is the old one with the changes merged in, in order: the same tuple when nothing changed.
A round costs what it counts, not what the VM's guest made NCC remember.

Chunks are plain tuples ``(vm, file id, index)``, whose order is the
:class:`~unicache.policy.ncc.ReplicaKey`'s. Pure: plain values, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from unicache.policy.nccevents import ReplicaKey

#: a chunk as a plain tuple, ``(vm, file id, index)``, in :class:`ReplicaKey` order
Flat = tuple[str, int, int]


def flat(key: ReplicaKey) -> Flat:
    """A chunk as a plain tuple (hashed and compared in C, in the key's order)."""
    return (key.vm, key.chunk.file_id, key.chunk.index)


@dataclass(frozen=True, slots=True, order=True)
class RemoteCount:
    """Remote reads of a chunk from one node since its last write or replica.

    :param key: the chunk.
    :param node: the reading node.
    :param count: reads.
    """

    key: ReplicaKey
    node: int
    count: int


class Counters:
    """The counters of one round: the state's tuple, and the changes made to it so far.

    :param base: the state's counters, sorted by chunk then node (one per chunk and node).
    """

    def __init__(self, base: tuple[RemoteCount, ...]) -> None:
        self.base = base
        # chunk -> node -> its counter now (None: dropped this round)
        self.changes: dict[Flat, dict[int, RemoteCount | None]] = {}

    def get(self, chunk: Flat, node: int) -> RemoteCount | None:
        """The counter of a chunk's reads from a node, if any."""
        changed = self.changes.get(chunk)
        if changed is not None and node in changed:
            return changed[node]
        want = (*chunk, node)
        i = bisect_left(self.base, want, key=_order)
        if i < len(self.base) and _order(self.base[i]) == want:
            return self.base[i]
        return None

    def put(self, chunk: Flat, node: int, counter: RemoteCount | None) -> None:
        """Set (or, with None, drop) the counter of a chunk's reads from a node."""
        self.changes.setdefault(chunk, {})[node] = counter

    def drop_chunk(self, chunk: Flat) -> bool:
        """Drop every counter of a chunk; whether it had any."""
        lo = bisect_left(self.base, chunk, key=_chunk)
        hi = bisect_right(self.base, chunk, key=_chunk, lo=lo)
        changed = self.changes.setdefault(chunk, {})
        had = any(c is not None for c in changed.values())
        for c in self.base[lo:hi]:
            if changed.get(c.node, c) is not None:
                had = True
            changed[c.node] = None
        for node in changed:
            changed[node] = None
        return had

    def result(self) -> tuple[RemoteCount, ...]:
        """The counters after the round, sorted by chunk then node."""
        if not self.changes:
            return self.base
        base = self.base
        out: list[RemoteCount] = []
        at = 0
        for chunk in sorted(self.changes):
            changed = self.changes[chunk]
            for node in sorted(changed):
                want = (*chunk, node)
                i = bisect_left(base, want, key=_order, lo=at)
                out += base[at:i]
                if i < len(base) and _order(base[i]) == want:
                    i += 1  # the old counter, replaced or dropped
                now = changed[node]
                if now is not None:
                    out.append(now)
                at = i
        out += base[at:]
        return tuple(out)


def _order(c: RemoteCount) -> tuple[str, int, int, int]:
    key = c.key
    return (key.vm, key.chunk.file_id, key.chunk.index, c.node)


def _chunk(c: RemoteCount) -> Flat:
    key = c.key
    return (key.vm, key.chunk.file_id, key.chunk.index)
