"""NCC's replicas: one replica's MQ bookkeeping, and a VM's replicas kept by chunk and node.

§3.2 "Management of NCC entries" keeps a node's replicas in MQ queues by access count
(:class:`Replica`, :func:`mq_order`). A VM's replicas outlive most rounds, and a round
with events changes a few of them (a hit, a replica made or dropped, the aging of those
above frequency one). So :func:`~unicache.policy.ncc.cache.ncc_round` keeps them in a
:class:`ReplicaIndex` (by chunk, then node; by node, then chunk; in key order; those above
frequency one) and hands it on with the state it returns
(:attr:`~unicache.policy.ncc.cache.NccState.index`, not saved, not compared): the next round
takes it over instead of building it again from the state's tuple. The index names the
tuple it stands for (:attr:`ReplicaIndex.token`): a round takes it over only from a state
holding that very tuple, and taking it clears the token, so a second round from the same
state (or from a copy of it) builds its own from the tuple. A round costs what changed;
the new tuple is a copy of the index's replicas in key order, made in C.

Chunks are plain tuples ``(vm, file id, index)`` (:data:`~unicache.policy.ncc.counters.
Flat`), whose order is the :class:`~unicache.policy.ncc.events.ReplicaKey`'s. Pure values
and a scratch index owned by one round at a time; no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from unicache.policy.ncc.counters import Flat
from unicache.policy.ncc.events import ReplicaKey

#: §3.2 "Management of NCC entries": MQ with eight LRU queues Q_0 .. Q_7
MQ_QUEUES = 8
#: a replica's chunk and node as a plain tuple, in :class:`Replica` order
ReplicaFlat = tuple[str, int, int, int]


@dataclass(frozen=True, slots=True, order=True)
class Replica:
    """One replica and its MQ bookkeeping.

    :param key: the chunk.
    :param node: the node holding it.
    :param freq: accesses, aged (>= 1).
    :param last: logical time of the last access (the policy's event counter).
    :param served: bytes it served in rounds after the one that made it (never aged).
    """

    key: ReplicaKey
    node: int
    freq: int
    last: int
    served: int = 0

    @property
    def queue(self) -> int:
        """MQ queue index: ``Q_i`` holds frequencies ``2^i .. 2^(i+1)-1``, capped at Q_7."""
        return min(MQ_QUEUES - 1, max(1, self.freq).bit_length() - 1)


def mq_order(replicas: Iterable[Replica]) -> tuple[Replica, ...]:
    """Replicas in MQ victim order: lower queue first, then least recently used.

    :param replicas: replicas of one node.
    :returns: them, first victim first.
    """
    return tuple(sorted(replicas, key=mq_key))


def mq_key(replica: Replica) -> tuple[int, int, ReplicaKey]:
    """Sort key of MQ victim order (one replica per chunk on a node: no ties)."""
    # Replica.queue, inline (a call per replica of a full node otherwise)
    queue = min(MQ_QUEUES - 1, max(1, replica.freq).bit_length() - 1)
    return (queue, replica.last, replica.key)


class ReplicaIndex:
    """A VM's replicas during a round, and between rounds with the state they make.

    :param replicas: the state's replicas (one per chunk and node).
    """

    def __init__(self, replicas: tuple[Replica, ...]) -> None:
        # chunk -> node -> replica
        self.by_chunk: dict[Flat, dict[int, Replica]] = {}
        # replicas above frequency one: the only ones an aging changes
        self._hot: set[tuple[Flat, int]] = set()
        flat: dict[ReplicaFlat, Replica] = {}
        given: list[ReplicaFlat] = []
        for r in replicas:
            chunk = (r.key.vm, r.key.chunk.file_id, r.key.chunk.index)
            held = self.by_chunk.get(chunk)
            if held is None:
                self.by_chunk[chunk] = {r.node: r}
            else:
                held[r.node] = r
            if r.freq > 1:
                self._hot.add((chunk, r.node))
            key = (*chunk, r.node)
            flat[key] = r
            given.append(key)
        # the plain keys in order, and the replicas in theirs (a state's tuple is sorted
        # already: one pass): the tuple is a copy of the list, in C
        self._keys = sorted(flat)
        self._in_order = list(map(flat.__getitem__, self._keys))
        # a node's chunks, made when a node's replicas are first counted (most VMs make no
        # replica in most rounds), then kept
        self._keys_on: dict[int, dict[Flat, dict[int, Replica]]] | None = None
        # the tuple the index stands for (remade from the keys when it changed)
        self._tuple = replicas
        self._changed = given != self._keys  # (not sorted, or one key twice)
        #: the tuple of the state that may take the index over (None: taken)
        self.token: tuple[Replica, ...] | None = None

    @property
    def keys_on(self) -> dict[int, dict[Flat, dict[int, Replica]]]:
        """Node -> its replicas' chunks -> the chunk's node -> replica map."""
        if self._keys_on is None:
            self._keys_on = {}
            for chunk, held in self.by_chunk.items():
                for node in held:
                    self._keys_on.setdefault(node, {})[chunk] = held
        return self._keys_on

    def put(self, chunk: Flat, replica: Replica) -> None:
        """Add a replica, or replace the one of its chunk and node."""
        node = replica.node
        held = self.by_chunk.get(chunk)
        if held is None:
            held = self.by_chunk[chunk] = {}
        key = (*chunk, node)
        at = bisect_left(self._keys, key)
        if node in held:
            self._in_order[at] = replica
        else:
            self._keys.insert(at, key)
            self._in_order.insert(at, replica)
            self.keys_on.setdefault(node, {})[chunk] = held
        held[node] = replica
        if replica.freq > 1:
            self._hot.add((chunk, node))
        else:
            self._hot.discard((chunk, node))
        self._changed = True

    def pop(self, chunk: Flat, node: int) -> Replica:
        """Drop the replica of a chunk on a node, and return it."""
        held = self.by_chunk[chunk]
        gone = held.pop(node)
        if not held:
            del self.by_chunk[chunk]
        if self._keys_on is not None:  # (not made yet: it will be made without it)
            self._keys_on[node].pop(chunk, None)
        at = bisect_left(self._keys, (*chunk, node))
        del self._keys[at], self._in_order[at]
        self._hot.discard((chunk, node))
        self._changed = True
        return gone

    def age(self) -> None:
        """MQ aging: every frequency down one, never below one (only those above change)."""
        for chunk, node in list(self._hot):
            held = self.by_chunk[chunk]
            r = held[node]
            aged = Replica(r.key, node, r.freq - 1, r.last, r.served)
            held[node] = aged
            self._in_order[bisect_left(self._keys, (*chunk, node))] = aged
            if aged.freq == 1:
                self._hot.discard((chunk, node))
            self._changed = True

    def replicas(self) -> tuple[Replica, ...]:
        """The replicas, sorted by chunk then node (the same tuple when none changed)."""
        if self._changed:
            self._tuple = tuple(self._in_order)
            self._changed = False
        return self._tuple
