"""NCC for VMs: node-local replicas of guest page-cache chunks read from remote NUMA nodes.

Follows the dual-layered file cache paper (dual-layered-file-cache-ccnuma.md) §3.2, with
a guest chunk's primary page-cache copy in the place of the NC entry and a node-local
replica in the place of the NCC entry:

* generation ("Generation of NCC entries"): a chunk read ``NCC_THRESHOLD`` = 2 times
  from the same remote node gets a replica on that node; a timer (the caller's round,
  "every second" in the paper) enables or disables generation per node from its share of
  free memory;
* management ("Management of NCC entries"): per node, a variation of MQ with 8 LRU queues
  ``Q_0..Q_7``, ``Q_i`` holding replicas accessed ``2^i .. 2^(i+1)-1`` times; a hit moves
  a replica to the MRU end of its queue; aging lowers every frequency by one (never below
  one); victims are taken from ``Q_0`` to ``Q_7``, LRU first;
* reclaim ("Hooks for reclaiming NCC entries"): of every three pages asked for, two come
  from the replicas and one from the primary cache; reclaiming a primary copy drops all
  its replicas;
* coherence ("Cache Coherence"): any write to a chunk drops every replica of it and
  resets its remote-read counters.

Replicas made and dropped are the model's :class:`~unicache.model.Replicate` and
:class:`~unicache.model.DropReplica` actions (a :class:`ReplicaKey` is their VM and chunk);
only the primary cache's share of a reclaim, :class:`ReclaimPrimary`, is NCC's own.

Pure: no I/O, no clock, no threads; the same state and events give the same decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from unicache.errors import ConfigError, StateError
from unicache.model import DropReplica, NodeMemory, Replicate
from unicache.policy.ncc.counters import CounterKey, Counters, Flat, flat
from unicache.policy.ncc.counters import RemoteCount as RemoteCount
from unicache.policy.ncc.events import Age as Age
from unicache.policy.ncc.events import NccAction as NccAction
from unicache.policy.ncc.events import NccEvent as NccEvent
from unicache.policy.ncc.events import PrimaryReclaimed as PrimaryReclaimed
from unicache.policy.ncc.events import Read as Read
from unicache.policy.ncc.events import Reclaim as Reclaim
from unicache.policy.ncc.events import ReclaimPrimary as ReclaimPrimary
from unicache.policy.ncc.events import ReplicaKey as ReplicaKey
from unicache.policy.ncc.events import Write as Write
from unicache.policy.ncc.kept import MQ_QUEUES as MQ_QUEUES
from unicache.policy.ncc.kept import Replica as Replica
from unicache.policy.ncc.kept import ReplicaIndex, mq_key
from unicache.policy.ncc.kept import mq_order as mq_order

#: §3.2 "Generation of NCC entries": remote reads from one node before a replica is made
NCC_THRESHOLD = 2
#: §3.2 "Hooks for reclaiming": replicas shrink twice as fast as the primary cache
NCC_RECLAIM_RATIO = 2
#: §3.2 "Generation of NCC entries": generation off below this share of free memory
#: (the paper keeps the value unstated; 10 % is unicache's default)
MIN_FREE_RATIO = 0.10

# Rule names as they appear in reasons, logs and metrics.
RULE_REPLICATE = "§3.2 generation threshold"
RULE_PRESSURE = "§3.2 memory-tight timer"
RULE_MQ_EVICT = "§3.2 MQ victim Q_0..Q_7"
RULE_WRITE = "§3.2 coherence write-invalidate"
RULE_PRIMARY_RECLAIMED = "§3.2 NC entry reclaimed"
RULE_RECLAIM = "§3.2 reclaim 2:1"


@dataclass(frozen=True, slots=True)
class NccParams:
    """Parameters of NCC.

    :param ncc_threshold: §3.2 remote reads from one node before replicating.
    :param min_free_ratio: §3.2 generation is off on a node below this free share.
    :param max_replicas_per_node: replicas a node may hold (its NCC capacity, in chunks).
    :param reclaim_ratio: §3.2 replicas freed per primary page freed.
    """

    ncc_threshold: int = NCC_THRESHOLD
    min_free_ratio: float = MIN_FREE_RATIO
    max_replicas_per_node: int = 1024
    reclaim_ratio: int = NCC_RECLAIM_RATIO

    def __post_init__(self) -> None:
        if self.ncc_threshold < 1 or self.max_replicas_per_node < 0 or self.reclaim_ratio < 0:
            raise ConfigError(f"invalid NccParams: {self}")


@dataclass(frozen=True, slots=True)
class NccState:
    """Everything NCC remembers between rounds (immutable; each round returns a new one).

    :param replicas: live replicas, sorted.
    :param counters: remote-read counters, sorted.
    :param disabled: nodes whose replica generation is off (memory tight).
    :param clock: logical time (events handled so far), for LRU order.
    """

    replicas: tuple[Replica, ...] = ()
    counters: tuple[RemoteCount, ...] = ()
    disabled: frozenset[int] = frozenset()
    clock: int = 0
    #: the counters' plain keys, for the next round to bisect (:mod:`~unicache.policy.
    #: ncccounters`): made from ``counters`` once, then handed on; not saved, not compared
    #: (None: not made yet, as after a restart)
    counter_keys: tuple[CounterKey, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    #: its replicas kept by chunk and node, for the next round to take over
    #: (:mod:`~unicache.policy.ncc.kept`; its token names ``replicas``); not saved, not
    #: compared (None: not made yet, or taken over by a round)
    index: ReplicaIndex | None = field(default=None, init=False, repr=False, compare=False)
    #: its counters in lists kept in order, for the next round to take over the same way
    #: (:class:`~unicache.policy.ncc.counters.Counters`; its token names ``counters``)
    counter_index: Counters | None = field(default=None, init=False, repr=False, compare=False)

    def with_counter_keys(self, keys: tuple[CounterKey, ...] | None) -> NccState:
        """This state, new, with its counters' keys (set once, before it is seen)."""
        object.__setattr__(self, "counter_keys", keys)
        return self

    def with_index(self, index: ReplicaIndex) -> NccState:
        """This state, new, handed the index its replicas came from (set once)."""
        index.token = self.replicas
        object.__setattr__(self, "index", index)
        return self

    def with_counter_index(self, counters: Counters) -> NccState:
        """This state, new, handed the counters it came from (set once)."""
        counters.token = self.counters
        object.__setattr__(self, "counter_index", counters)
        return self

    def take_counters(self) -> Counters:
        """Its counters, taken over as :meth:`take_index` takes the replicas' index."""
        carried = self.counter_index
        if carried is None or carried.token is not self.counters:
            return Counters(self.counters, self.counter_keys)
        carried.token = None
        object.__setattr__(self, "counter_index", None)
        return carried

    def take_index(self) -> ReplicaIndex:
        """Its replicas' index, taken over (a round then changes it); made again from the
        replicas when this state holds none, or one that stands for another tuple."""
        index = self.index
        if index is None or index.token is not self.replicas:
            return ReplicaIndex(self.replicas)
        index.token = None  # taken: a second round from this state (or a copy) makes its own
        object.__setattr__(self, "index", None)
        return index

    def replica_nodes(self, key: ReplicaKey) -> frozenset[int]:
        """Nodes holding a replica of a chunk."""
        return frozenset(r.node for r in self.replicas if r.key == key)


@dataclass(frozen=True, slots=True)
class Retired:
    """A replica dropped this round, and what it served in its life.

    :param node: the node that held it.
    :param served: bytes it served (:attr:`Replica.served`).
    """

    node: int
    served: int


@dataclass(frozen=True, slots=True)
class NccDecision:
    """What one NCC round decided.

    :param actions: replicate/drop/reclaim actions, in order.
    :param served: for each read, the node whose copy serves it (home or replica node).
    :param state: the state after the round.
    :param retired: the replicas dropped, in order (what they served: NCC's gain observed).
    """

    actions: tuple[NccAction, ...]
    served: tuple[int, ...]
    state: NccState
    retired: tuple[Retired, ...] = ()


class _Work:
    """Mutable scratch copy of a state, used only inside :func:`ncc_round`.

    Replicas and counters are kept by chunk, then node (and the chunks of each node's
    replicas too), so that a write or a reclaim costs what the chunk or the node holds,
    never a scan of every counter a guest's reports have made (issue #12: a flood of
    writes once took minutes a round). A node's chunks map to their chunk's own
    node -> replica map, so a node's replicas are found without hashing their keys again.
    Chunks are plain tuples here (:data:`Flat`): a round hashes each many times. The
    replicas' index is the previous round's, taken over (:mod:`~unicache.policy.
    nccreplicas`): a round costs what it changes, not what the VM holds.
    """

    def __init__(self, state: NccState, params: NccParams) -> None:
        self.params = params
        self.index = state.take_index()
        self.replicas = self.index.by_chunk  # chunk -> node -> replica (read only here)
        # the previous round's lists, taken over, or the state's tuple bisected (ncccounters)
        self.counters = state.take_counters()
        self.disabled = state.disabled
        self.aside: frozenset[int] = frozenset()
        self.clock = state.clock
        self.actions: list[NccAction] = []
        self.served: list[int] = []
        self.retired: list[Retired] = []
        # replicas made this round: the guest has no copy yet, so their reads save nothing
        self.fresh: set[tuple[Flat, int]] = set()

    @property
    def keys_on(self) -> dict[int, dict[Flat, dict[int, Replica]]]:
        return self.index.keys_on

    def drop(self, chunk: Flat, node: int, rule: str, why: str) -> None:
        gone = self.index.pop(chunk, node)
        if (chunk, node) in self.fresh:
            self.fresh.discard((chunk, node))  # made and dropped in one round: never filled
        else:
            self.retired.append(Retired(node, gone.served))
        key = gone.key
        self.actions.append(DropReplica(key.vm, key.chunk, node, rule, f"{rule}: {why}"))

    def drop_all(self, key: ReplicaKey, rule: str, why: str) -> None:
        chunk = flat(key)
        for node in sorted(self.replicas.get(chunk, ())):
            self.drop(chunk, node, rule, why)

    def on_node(self, node: int) -> list[Replica]:
        return [held[node] for held in self.keys_on.get(node, {}).values()]

    def reads(self, ev: Read, repeats: int) -> None:
        """``repeats`` reads in a row, each an event (the clock one on for each): those
        the home node or a replica serves are the same for every repeat, so served at once."""
        if ev.node == ev.home:
            self.clock += repeats
            self.served += [ev.home] * repeats
            return
        chunk = flat(ev.key)
        while repeats:
            held = self.replicas.get(chunk, {})
            have = held.get(ev.node)
            if have is not None:  # a hit, and so is every read left
                saved = 0 if (chunk, ev.node) in self.fresh else ev.nbytes
                self.clock += repeats
                self.index.put(
                    chunk,
                    Replica(
                        have.key,
                        ev.node,
                        have.freq + repeats,
                        self.clock,
                        have.served + saved * repeats,
                    ),
                )
                self.served += [ev.node] * repeats
                return
            self.clock += 1
            self.miss(ev, chunk)
            repeats -= 1

    def miss(self, ev: Read, chunk: Flat) -> None:
        """A remote read no replica serves: counted, and at the threshold replicated."""
        self.served.append(ev.home)
        had = self.counters.get(chunk, ev.node)
        count = 1 if had is None else had.count + 1
        self.counters.put(chunk, ev.node, RemoteCount(ev.key, ev.node, count))
        if count < self.params.ncc_threshold:
            return
        if ev.node in self.disabled or ev.node in self.aside:
            return  # RULE_PRESSURE, or nccgain's step-aside: generation is off on this node
        if self.params.max_replicas_per_node == 0:
            return
        if len(self.keys_on.get(ev.node, ())) >= self.params.max_replicas_per_node:
            # mq_order's first, without sorting the node's replicas for one
            victim = min(self.on_node(ev.node), key=mq_key)
            self.drop(
                flat(victim.key),
                victim.node,
                RULE_MQ_EVICT,
                f"node {ev.node} full, Q_{victim.queue}",
            )
        self.index.put(chunk, Replica(ev.key, ev.node, 1, self.clock))
        self.fresh.add((chunk, ev.node))
        self.counters.put(chunk, ev.node, None)
        self.actions.append(
            Replicate(
                ev.key.vm,
                ev.key.chunk,
                ev.node,
                RULE_REPLICATE,
                f"{RULE_REPLICATE}: {count} reads from node {ev.node} of a chunk on {ev.home}",
            )
        )

    def write(self, ev: Write) -> None:
        self.drop_all(ev.key, RULE_WRITE, "chunk written")
        self.counters.drop_chunk(flat(ev.key))

    def reclaim(self, ev: Reclaim) -> None:
        ratio = self.params.reclaim_ratio
        want = -(-ev.pages * ratio // (ratio + 1))  # ceil: 3 pages -> 2 replicas + 1 primary
        victims = mq_order(self.on_node(ev.node))[:want]
        for v in victims:
            self.drop(flat(v.key), v.node, RULE_RECLAIM, f"node {ev.node} asked for {ev.pages}")
        primary = ev.pages - len(victims)
        if primary > 0:
            self.actions.append(
                ReclaimPrimary(
                    ev.node,
                    primary,
                    f"{RULE_RECLAIM}: {len(victims)} of {ev.pages} from replicas",
                )
            )

    def age(self) -> None:
        self.index.age()  # only the replicas above frequency one are made again

    def state(self) -> NccState:
        # sorted by the plain chunk, then node: the dataclasses' own order (one replica,
        # or counter, per chunk and node), in C; the index handed on with it
        counters, keys = self.counters.result()
        state = NccState(self.index.replicas(), counters, self.disabled, self.clock)
        state = state.with_counter_keys(keys).with_index(self.index)
        return state.with_counter_index(self.counters)


def aged(state: NccState, disabled: frozenset[int]) -> NccState:
    """The state after a round of nothing but the aging (what :func:`ncc_round` returns
    for it, at the cost of the replicas above frequency one).

    :param state: the state after the previous round.
    :param disabled: the nodes where generation is off (:func:`memory_tight_nodes`).
    :returns: the state, aged, with the clock one on.
    """
    index = state.take_index()
    index.age()
    counters = state.take_counters()
    again = NccState(index.replicas(), state.counters, disabled, state.clock + 1)
    again = again.with_counter_keys(state.counter_keys).with_index(index)
    return again.with_counter_index(counters)


def memory_tight_nodes(memory: Iterable[NodeMemory], params: NccParams) -> frozenset[int]:
    """§3.2 timer: the nodes whose free share is below ``min_free_ratio``.

    :param memory: free memory per node.
    :param params: the parameters.
    :returns: nodes where replica generation is off.
    """
    return frozenset(
        m.node
        for m in memory
        if m.total_bytes <= 0 or m.free_bytes / m.total_bytes < params.min_free_ratio
    )


def ncc_round(
    state: NccState,
    memory: Iterable[NodeMemory],
    events: Iterable[NccEvent],
    params: NccParams,
    aside: frozenset[int] = frozenset(),
) -> NccDecision:
    """One round of NCC: free-memory check, then the events in order.

    1. Nodes below ``min_free_ratio`` free memory stop generating replicas (others
       resume), and so do the ``aside`` nodes; existing replicas stay until reclaimed.
    2. A read from the home node is served by the primary; from another node, by its
       replica if any (a hit: frequency + 1, MRU); otherwise the primary serves it and
       the node's counter grows; at ``ncc_threshold`` a replica is made (MQ victim
       dropped first when the node is full).
    3. A write drops every replica of the chunk and resets its counters.
    4. A reclaimed primary copy drops every replica of the chunk.
    5. A reclaim of ``n`` pages drops ``ceil(n*2/3)`` replicas in MQ order and asks the
       primary cache for the rest.
    6. Aging lowers every replica's frequency by one, never below one.

    :param state: the state after the previous round.
    :param memory: free memory per node, observed this round.
    :param events: the events of the round, in order.
    :param params: the parameters.
    :param aside: nodes where no replica is predicted to pay (:mod:`unicache.policy.ncc.gain`).
    :returns: actions, which node served each read, the new state, the replicas dropped.
    """
    work = _Work(state, params)
    work.disabled = memory_tight_nodes(memory, params)
    work.aside = aside
    queue = list(events)
    i = 0
    while i < len(queue):
        ev = queue[i]
        i += 1
        if isinstance(ev, Read):
            # a record's reads from one node are one event, repeated (policy.ncc.replicas)
            repeats = 1
            while i < len(queue) and queue[i] is ev:
                repeats, i = repeats + 1, i + 1
            work.reads(ev, repeats)
            continue
        work.clock += 1
        if isinstance(ev, Write):
            work.write(ev)
        elif isinstance(ev, PrimaryReclaimed):
            work.drop_all(ev.key, RULE_PRIMARY_RECLAIMED, "primary copy reclaimed")
        elif isinstance(ev, Reclaim):
            work.reclaim(ev)
        else:
            work.age()
    return NccDecision(tuple(work.actions), tuple(work.served), work.state(), tuple(work.retired))


class NccPolicy:
    """NCC with fixed parameters: ``start`` validates a restored state, ``decide`` runs
    :func:`ncc_round`.

    Invariants of every state it returns (checked by ``start``):

    1. at most ``max_replicas_per_node`` replicas on a node;
    2. at most one replica of a chunk per node, with frequency >= 1;
    3. no replica of a chunk and a pending counter for the same node at once.

    :param params: the parameters.
    """

    name = "ncc"

    def __init__(self, params: NccParams | None = None) -> None:
        self.params = params or NccParams()

    def start(self, state: NccState) -> None:
        """Validate a restored state (idempotent).

        :raises StateError: naming the broken invariant and the remedy.
        """
        where = [(r.key, r.node) for r in state.replicas]
        per_node: dict[int, int] = {}
        for r in state.replicas:
            per_node[r.node] = per_node.get(r.node, 0) + 1
            if r.freq < 1:
                raise StateError.restored(
                    f"ncc invariant 2: replica {r.key} on {r.node} has freq < 1"
                )
        if any(count > self.params.max_replicas_per_node for count in per_node.values()):
            raise StateError.restored(
                "ncc invariant 1: a node holds more replicas than max_replicas_per_node; "
                "raise it or discard the state"
            )
        if len(set(where)) != len(where):
            raise StateError.restored("ncc invariant 2: duplicate replica; discard the state")
        if {(c.key, c.node) for c in state.counters} & set(where):
            raise StateError.restored(
                "ncc invariant 3: counter for a replicated chunk; discard the state"
            )

    def decide(
        self,
        state: NccState,
        memory: Iterable[NodeMemory],
        events: Iterable[NccEvent],
        aside: frozenset[int] = frozenset(),
    ) -> NccDecision:
        """One round (see :func:`ncc_round`); the same inputs give the same decision."""
        return ncc_round(state, memory, events, self.params, aside)
