"""NCC's remote-read counters during one round: the state's sorted tuple and the round's changes.

The counters are §3.2's "Generation of NCC entries": a chunk's reads from one remote node
before it is replicated. A guest's counters (:class:`RemoteCount`, up to
``MAX_COUNTERS_PER_VM`` a VM) outlive most rounds unchanged: a round reads a few chunks and
counts a few of them. So :func:`~unicache.policy.ncc.ncc_round` does not copy them into a
map of maps every round: the state keeps, with its sorted tuple, the counters' plain keys
(:data:`CounterKey`, hashed and compared in C; made once, then handed on:
:attr:`~unicache.policy.ncc.NccState.counter_keys`), a round that looks a counter up maps
the keys to the counters in C, and what it changes is kept aside, by chunk then node. The
new tuple is the old one with the changes, sorted by key in C (the same tuple when
nothing changed). A round costs what it counts, not what the VM's guest made NCC
remember, in Python.

Chunks are plain tuples ``(vm, file id, index)``, whose order is the
:class:`~unicache.policy.ncc.ReplicaKey`'s. Pure: plain values, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from unicache.policy.nccevents import ReplicaKey

#: a chunk as a plain tuple, ``(vm, file id, index)``, in :class:`ReplicaKey` order
Flat = tuple[str, int, int]
#: a counter's chunk and node as a plain tuple, in :class:`RemoteCount` order
CounterKey = tuple[str, int, int, int]


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


def counter_keys(counters: tuple[RemoteCount, ...]) -> tuple[CounterKey, ...]:
    """The plain keys of counters, in their order."""
    return tuple((c.key.vm, c.key.chunk.file_id, c.key.chunk.index, c.node) for c in counters)


class Counters:
    """The counters of one round: the state's tuple, and the changes made to it so far.

    :param base: the state's counters, sorted by chunk then node (one per chunk and node).
    :param keys: their plain keys (None: made from them when first needed).
    """

    def __init__(self, base: tuple[RemoteCount, ...], keys: tuple[CounterKey, ...] | None) -> None:
        self.base = base
        self._keys = keys
        self._index: dict[CounterKey, RemoteCount] | None = None
        # chunk -> node -> its counter now (None: dropped this round)
        self.changes: dict[Flat, dict[int, RemoteCount | None]] = {}

    @property
    def keys(self) -> tuple[CounterKey, ...]:
        if self._keys is None:
            self._keys = counter_keys(self.base)
        return self._keys

    def get(self, chunk: Flat, node: int) -> RemoteCount | None:
        """The counter of a chunk's reads from a node, if any."""
        changed = self.changes.get(chunk)
        if changed is not None and node in changed:
            return changed[node]
        if self._index is None:  # made in C from the keys, on the first look-up
            self._index = dict(zip(self.keys, self.base, strict=True))
        return self._index.get((*chunk, node))

    def put(self, chunk: Flat, node: int, counter: RemoteCount | None) -> None:
        """Set (or, with None, drop) the counter of a chunk's reads from a node."""
        self.changes.setdefault(chunk, {})[node] = counter

    def drop_chunk(self, chunk: Flat) -> None:
        """Drop every counter of a chunk."""
        keys = self.keys
        changed = self.changes.setdefault(chunk, {})
        for node in changed:
            changed[node] = None
        i = bisect_left(keys, chunk)  # a chunk sorts before its (chunk, node) keys
        while i < len(keys) and keys[i][:3] == chunk:
            changed[keys[i][3]] = None
            i += 1

    def result(self) -> tuple[tuple[RemoteCount, ...], tuple[CounterKey, ...] | None]:
        """The counters after the round, sorted by chunk then node, and their keys."""
        if not self.changes:
            return self.base, self._keys
        # the counters by key, changed, then in key order: every pass over all of them is
        # C's (a map from two tuples, a sort of plain tuples, a look-up of each)
        merged = dict(self._index or zip(self.keys, self.base, strict=True))
        for chunk, changed in self.changes.items():
            for node, now in changed.items():
                if now is None:
                    merged.pop((*chunk, node), None)
                else:
                    merged[(*chunk, node)] = now
        keys = sorted(merged)
        return tuple(map(merged.__getitem__, keys)), tuple(keys)
