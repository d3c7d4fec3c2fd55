"""NCC's remote-read counters from round to round: the state's sorted tuple and lists kept in order.

The counters are §3.2's "Generation of NCC entries": a chunk's reads from one remote node
before it is replicated. A guest's counters (:class:`RemoteCount`, up to
``MAX_COUNTERS_PER_VM`` a VM) outlive most rounds unchanged: a round reads a few chunks and
counts a few of them. So :func:`~unicache.policy.ncc.cache.ncc_round` does not copy them into a
map of maps every round: the state keeps, with its sorted tuple, the counters' plain keys
(:data:`CounterKey`, hashed and compared in C; made once, then handed on:
:attr:`~unicache.policy.ncc.cache.NccState.counter_keys`), a round looks a counter up by
bisecting them, and what it changes it changes in lists kept in order, handed on with the
state (:class:`Counters`). The new tuple is a copy of the list, in C (the same
tuple when nothing changed). A round costs what it counts, not what the VM's guest made
NCC remember.

Chunks are plain tuples ``(vm, file id, index)``, whose order is the
:class:`~unicache.policy.ncc.cache.ReplicaKey`'s. Plain values, and lists owned by one round at a
time; no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from unicache.policy.ncc.events import ReplicaKey

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
    """The counters of one round, handed on to the next with the state they make.

    Looked up by bisection of their plain keys (in C); the first change makes lists of the
    keys and counters in order, changed in place from then on (a counter is put or dropped
    where bisection finds it), so the state's tuple is a copy of a list. Handed on with
    the state (:attr:`~unicache.policy.ncc.cache.NccState.counter_index`, not saved, not
    compared), a VM's counters are listed once, not every round it counts a read in.

    :param base: the state's counters, sorted by chunk then node (one per chunk and node).
    :param keys: their plain keys (None: made from them when first needed).
    """

    def __init__(self, base: tuple[RemoteCount, ...], keys: tuple[CounterKey, ...] | None) -> None:
        self.base = base
        self._keys = keys
        # keys and counters in order, changed in place (None: nothing changed yet)
        self._order: tuple[list[CounterKey], list[RemoteCount]] | None = None
        self._changed = False
        #: the counters tuple of the state that may take these over (None: taken)
        self.token: tuple[RemoteCount, ...] | None = None

    @property
    def keys(self) -> tuple[CounterKey, ...]:
        if self._keys is None:
            self._keys = counter_keys(self.base)
        return self._keys

    def _lists(self) -> tuple[list[CounterKey], list[RemoteCount]]:
        if self._order is None:
            self._order = (list(self.keys), list(self.base))
        return self._order

    def get(self, chunk: Flat, node: int) -> RemoteCount | None:
        """The counter of a chunk's reads from a node, if any."""
        keys, counters = self._order or (self.keys, self.base)
        key = (*chunk, node)
        at = bisect_left(keys, key)
        return counters[at] if at < len(keys) and keys[at] == key else None

    def put(self, chunk: Flat, node: int, counter: RemoteCount | None) -> None:
        """Set (or, with None, drop) the counter of a chunk's reads from a node."""
        keys, counters = self._lists()
        key = (*chunk, node)
        at = bisect_left(keys, key)
        present = at < len(keys) and keys[at] == key
        if counter is None:
            if present:
                del keys[at], counters[at]
                self._changed = True
        elif present:
            counters[at] = counter
            self._changed = True
        else:
            keys.insert(at, key)
            counters.insert(at, counter)
            self._changed = True

    def drop_chunk(self, chunk: Flat) -> None:
        """Drop every counter of a chunk."""
        keys, counters = self._order or (self.keys, self.base)
        at = end = bisect_left(keys, chunk)  # a chunk sorts before its (chunk, node) keys
        while end < len(keys) and keys[end][:3] == chunk:
            end += 1
        if end > at:
            keys, counters = self._lists()
            del keys[at:end], counters[at:end]
            self._changed = True

    def result(self) -> tuple[tuple[RemoteCount, ...], tuple[CounterKey, ...] | None]:
        """The counters after the round, sorted by chunk then node, and their keys."""
        if self._changed and self._order is not None:
            keys, counters = self._order
            self.base, self._keys = tuple(counters), tuple(keys)
            self._changed = False
        return self.base, self._keys
