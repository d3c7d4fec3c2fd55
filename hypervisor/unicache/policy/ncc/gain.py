"""NCC's gain prediction: whether a node's replicas pay for their copies, else step aside.

The dual-layered file cache paper replicates every chunk a remote node reads twice (§3.2)
and measures the gain afterwards (§5). A replica costs its node a copy of the chunk: the
reader's remote read of it happens anyway, the copy adds a local write. It saves the
difference between a remote and a local read of the chunk on every later read served
from it. So a replica pays once it serves ``break_even`` chunk reads
(:meth:`ReplicaCost.break_even`, with a ``margin`` so that an error in the topology's
figures never turns into a slower VM); where replicas are dropped (MQ victims, reclaim,
writes) before they serve that many, every replica is a loss: iozone reads each byte once
per test, and a node's 10 % budget holds a sixth of the other node's files, so MQ evicts
most replicas before a read uses them (docs/simulator.md, "The NCC iozone experiment").

What a node observes, round by round, from the guest's reads per node (the agent does
not report the reads its replicas serve; a read from a node the host's table replicates
the chunk on is one):

* before the round's replicas (:func:`predict`), its **replicas' misses**: chunks of
  other nodes it read without a replica there. More of them over the last
  ``WINDOW_ROUNDS`` rounds than ``ncc_threshold`` times the replicas it may hold is a
  working set its replicas cannot hold: MQ would evict each replica before its next read
  (a loop over more chunks than a cache holds hits nothing), so no new replica is made;
* after the round (:func:`judge`), what its **dropped replicas served**
  (:class:`~unicache.policy.ncc.cache.Retired`: bytes read from them in the rounds after the
  one that made them). A node that dropped at least ``MIN_RETIRED`` replicas in the
  window which served fewer than ``break_even`` chunk reads each makes no new replica for
  ``PROBE_ROUNDS`` rounds, then NCC probes it again; each probe that does not pay doubles
  the rounds aside (at most ``MAX_ASIDE_ROUNDS``), one that pays clears them. A replica
  still held is never counted against its node: a working set that fits keeps
  replicating.

A node aside keeps its replicas' normal life (served, aged, dropped by writes, reclaim
and MQ); only new replicas stop. On a one-node host no read is remote: every node is aside.

Pure: no I/O, no clock; the same ledgers and observations give the same verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from unicache.model import ChunkId
from unicache.policy.machine import remote_gap_for
from unicache.policy.ncc.cache import NccEvent, NccState, Read, Retired
from unicache.topology import Topology

#: a replica must save this many times its copy (never slower: a 2x error still pays)
REPLICA_MARGIN = 2.0
#: rounds of dropped replicas a node is judged over
WINDOW_ROUNDS = 8
#: replicas dropped in the window before a node is judged (fewer: too little to say)
MIN_RETIRED = 8
#: rounds a node stays aside before NCC probes it again; doubled by each failed probe
PROBE_ROUNDS = 8
#: the most rounds a node stays aside
MAX_ASIDE_ROUNDS = 128
#: a core's DRAM bandwidth where the topology gives none (bytes per cycle)
DEFAULT_DRAM_BYTES_PER_CYCLE = 1.0
#: refusal kind: NCC makes no replicas on a VM's nodes whose replicas did not pay
NCC_NO_GAIN = "NCC_NO_GAIN"


@dataclass(frozen=True, slots=True)
class ReplicaCost:
    """What one replica costs and what each later local read of it saves, in cycles.

    :param chunk_bytes: bytes of a chunk (what a replica copies).
    :param copy_cycles: the copy: a local write of the chunk (the remote read that fills
        it is the reader's own).
    :param saving_cycles: a chunk read from the local node instead of a remote one.
    :param margin: the saving must cover the copy this many times.
    :param source: where the figures came from, for the decision log.
    """

    chunk_bytes: int
    copy_cycles: float
    saving_cycles: float
    margin: float = REPLICA_MARGIN
    source: str = ""

    @property
    def break_even(self) -> float:
        """Chunk reads a replica must serve to pay ``margin`` times its copy (inf: never)."""
        if self.saving_cycles <= 0:
            return math.inf
        return self.margin * self.copy_cycles / self.saving_cycles

    def pays(self, served_bytes: int, replicas: int) -> bool:
        """Whether ``replicas`` that served ``served_bytes`` in all paid for their copies."""
        return served_bytes >= self.break_even * replicas * self.chunk_bytes


def replica_cost_for(topology: Topology, chunk_size: int) -> ReplicaCost:
    """A replica's cost and saving from the machine: a core's DRAM bandwidth for a chunk
    read locally, remote reads slower by the remote-to-local latency ratio (the SLIT
    distance ratio where latencies are unknown, the nearest remote node's: the least
    saving). One node: nothing is remote, and no replica ever pays.

    :param topology: the machine.
    :param chunk_size: bytes per chunk.
    :returns: the cost model.
    """
    node = topology.nodes[0]
    bandwidth = node.core_dram_bandwidth_bytes_per_cycle or node.dram_bandwidth_bytes_per_cycle
    local = chunk_size / (bandwidth or DEFAULT_DRAM_BYTES_PER_CYCLE)
    ratio, source = _remote_ratio(topology)
    if not bandwidth:
        source += f", default {DEFAULT_DRAM_BYTES_PER_CYCLE} B/cycle"
    return ReplicaCost(chunk_size, local, local * (ratio - 1.0), source=source)


def _remote_ratio(topology: Topology) -> tuple[float, str]:
    """How much slower a remote read is than a local one, and where that came from.

    From the DRAM latencies as OBS's homes read them (:func:`remote_gap_for`); a machine
    without them falls back to its SLIT distances, not to the paper's default gap,
    because a replica's break-even must come from this machine.
    """
    nodes = topology.nodes
    if len(nodes) < 2:
        return 1.0, "one NUMA node"
    if topology.remote_latency_cycles and any(n.dram_latency_cycles for n in nodes):
        gap, source = remote_gap_for(topology)
        return 1.0 + gap, source
    ratios = [
        d / n.distances[n.id]
        for n in nodes
        if n.id < len(n.distances) and n.distances[n.id] > 0
        for i, d in enumerate(n.distances)
        if i != n.id
    ]
    return min(ratios, default=1.0), "SLIT distances"


@dataclass(frozen=True, slots=True)
class NodeLedger:
    """What NCC saw of one node's replicas, and whether it makes any there.

    :param node: the guest node.
    :param remote: chunks of other nodes the node read without a replica there, in each
        of the last ``WINDOW_ROUNDS`` rounds (:func:`remote_chunks`): together, its
        remotely-read working set beyond what its replicas hold.
    :param retired: replicas dropped in each of those rounds.
    :param served: bytes those replicas served, by the same rounds.
    :param aside: rounds left before NCC probes the node again after its replicas did not
        pay (0: not aside for that).
    :param strikes: probes in a row whose replicas did not pay.
    """

    node: int
    remote: tuple[int, ...] = ()
    retired: tuple[int, ...] = ()
    served: tuple[int, ...] = ()
    aside: int = 0
    strikes: int = 0


@dataclass(frozen=True, slots=True)
class GainVerdict:
    """A verdict over a VM's nodes.

    :param ledgers: the ledgers after it, by node.
    :param aside: nodes where NCC makes no new replica this round.
    :param reasons: one line per node aside, for the decision log.
    """

    ledgers: tuple[NodeLedger, ...]
    aside: frozenset[int] = frozenset()
    reasons: tuple[str, ...] = ()


def remote_chunks(
    events: Iterable[NccEvent],
    known: NccState,
    held: Mapping[ChunkId, frozenset[int]] | None = None,
) -> dict[int, int]:
    """Chunks each node read from another node's primary copy in one round without a
    replica of its own to serve them (NCC's state before the round): its replicas' misses.

    :param events: the round's events (of one VM).
    :param known: NCC's state before the round.
    :param held: the nodes holding each chunk's replicas in ``known``, if derived
        (looked up per chunk read instead of a pass over the replicas).
    :returns: reading node -> chunks.
    """
    # chunks as plain tuples (vm, file id, index): hashed in C, not by two dataclasses
    read: dict[int, set[tuple[str, int, int]]] = {}
    last = None
    for ev in events:
        if ev is last:
            continue  # a record's reads from one node: one event, repeated (policy.ncc.replicas)
        last = ev
        if isinstance(ev, Read) and ev.node != ev.home:
            key = ev.key
            read.setdefault(ev.node, set()).add((key.vm, key.chunk.file_id, key.chunk.index))
    if not read:
        return {}  # no remote read: no pass over the replicas (most VMs, most rounds)
    if held is not None:
        # (one VM's events: a chunk's plain tuple names its ChunkId)
        return {
            node: n
            for node, keys in read.items()
            if (n := sum(1 for _, f, i in keys if node not in held.get(ChunkId(f, i), ())))
        }
    for r in known.replicas:
        keys = read.get(r.node)
        if keys:
            keys.discard((r.key.vm, r.key.chunk.file_id, r.key.chunk.index))
    return {node: len(keys) for node, keys in read.items() if keys}


def predict(
    ledgers: Iterable[NodeLedger],
    remote: Mapping[int, int],
    nodes: Iterable[int],
    capacity: int,
    threshold: int,
    cost: ReplicaCost,
) -> GainVerdict:
    """Before a round's replicas: the nodes where NCC predicts none would pay.

    1. This round's remotely-read chunks join the node's window (the oldest round leaves).
       On a host where no read is remote (one NUMA node), every node is aside.
    2. A node whose replicas missed more chunks of other nodes in the window than
       ``capacity`` (the replicas it may hold) times ``threshold`` (the misses of a chunk
       read once a round before its replica is made) reads a working set its replicas
       cannot hold: a replica would be evicted before it is read again (MQ: a loop over
       more chunks than a cache holds hits nothing), so no new replica is made there.
    3. A node aside after replicas that did not pay stays aside and counts a round down;
       at 0, NCC probes it again.

    :param ledgers: the ledgers after the previous round.
    :param remote: this round's :func:`remote_chunks`.
    :param nodes: the VM's nodes (a ledger of another node is forgotten).
    :param capacity: replicas a node may hold (NCC's ``max_replicas_per_node``).
    :param threshold: remote reads of a chunk before its replica (NCC's ``ncc_threshold``).
    :param cost: the cost model.
    :returns: the ledgers, the nodes aside this round, and why.
    """
    before = {ledger.node: ledger for ledger in ledgers}
    out: list[NodeLedger] = []
    reasons: list[str] = []
    aside: set[int] = set()
    never = math.isinf(cost.break_even)
    for node in sorted(set(nodes)):
        old = before.get(node) or NodeLedger(node)
        now = remote.get(node, 0)
        window = _slide(old.remote, now)
        # the ledger's own fields, not dataclasses.replace: a fleet's VMs, every round (and
        # the ledger itself when its window stays, a quiet node's)
        ledger = old
        if window is not old.remote:
            ledger = NodeLedger(node, window, old.retired, old.served, old.aside, old.strikes)
        reading = now > 0  # only a node that reads is told why (no noise)
        if never:
            aside.add(node)
            if reading:
                reasons.append(f"node {node}: no read is remote here ({cost.source})")
        elif old.aside > 0:
            ledger = NodeLedger(node, window, old.retired, old.served, old.aside - 1, old.strikes)
            aside.add(node)
            if reading:
                reasons.append(
                    f"node {node}: {_aside(old.aside - 1, old.strikes)}; {_pays_after(cost)}"
                )
        elif sum(window) > capacity * threshold:
            aside.add(node)
            if reading:
                reasons.append(
                    f"node {node}: its replicas missed {sum(window)} chunks of other nodes "
                    f"in {len(window)} rounds, more than {threshold} reads each of the "
                    f"{capacity} it may hold: they would be evicted before read again"
                )
        out.append(ledger)
    return GainVerdict(tuple(out), frozenset(aside), tuple(reasons))


def judge(verdict: GainVerdict, retired: Iterable[Retired], cost: ReplicaCost) -> GainVerdict:
    """After a round: judge each node by the replicas it dropped in the window.

    This round's dropped replicas join the window of each node that made replicas this
    round (a node aside made none: what it drops is older, and a probe starts afresh). A
    node with ``MIN_RETIRED`` dropped replicas in it that did not serve ``break_even`` chunk
    reads each steps aside for ``PROBE_ROUNDS`` rounds, doubled per strike (at most
    ``MAX_ASIDE_ROUNDS``); one whose replicas paid has its strikes cleared.

    :param verdict: :func:`predict`'s this round.
    :param retired: the replicas dropped this round.
    :param cost: the cost model.
    :returns: the ledgers for the next round, the nodes that stepped aside, and why.
    """
    count: dict[int, int] = {}
    served: dict[int, int] = {}
    for r in retired:
        count[r.node] = count.get(r.node, 0) + 1
        served[r.node] = served.get(r.node, 0) + r.served
    out: list[NodeLedger] = []
    reasons: list[str] = []
    for old in verdict.ledgers:
        node = old.node
        if node in verdict.aside:
            if old.retired or old.served:
                old = NodeLedger(node, old.remote, (), (), old.aside, old.strikes)
            out.append(old)
            continue
        window = _slide(old.retired, count.get(node, 0))
        bytes_ = _slide(old.served, served.get(node, 0))
        ledger = old
        if window is not old.retired or bytes_ is not old.served:
            ledger = NodeLedger(node, old.remote, window, bytes_, old.aside, old.strikes)
        if sum(window) >= MIN_RETIRED:
            if cost.pays(sum(bytes_), sum(window)):
                ledger = NodeLedger(node, old.remote, window, bytes_, old.aside, 0)
            else:
                strikes = old.strikes + 1
                rounds = min(PROBE_ROUNDS << (strikes - 1), MAX_ASIDE_ROUNDS)
                ledger = NodeLedger(node, old.remote, (), (), rounds, strikes)
                reads = sum(bytes_) / cost.chunk_bytes / sum(window)
                reasons.append(
                    f"node {node}: its last {sum(window)} replicas dropped served {reads:.1f} "
                    f"chunk reads each; {_pays_after(cost)}; no new replicas for the next "
                    f"{rounds} rounds, then a probe (strike {strikes})"
                )
        out.append(ledger)
    aside = frozenset(ledger.node for ledger in out if ledger.aside > 0)
    return GainVerdict(tuple(out), aside, tuple(reasons))


def quiet(ledgers: tuple[NodeLedger, ...], nodes: Iterable[int], cost: ReplicaCost) -> bool:
    """Whether :func:`predict` then :func:`judge` would hand ``ledgers`` back as they are,
    with no node aside and nothing to say, for a round without remote reads or dropped
    replicas: a replica may pay here, and every one of ``nodes`` has a ledger of full
    windows of zeros and is not aside (a VM whose guest has read nothing remote for
    ``WINDOW_ROUNDS`` rounds).

    :param ledgers: the ledgers after the previous round, by node.
    :param nodes: the VM's nodes.
    :param cost: the cost model.
    """
    if math.isinf(cost.break_even) or [ledger.node for ledger in ledgers] != sorted(set(nodes)):
        return False
    return all(
        not ledger.aside and ledger.remote == ledger.retired == ledger.served == _QUIET
        for ledger in ledgers
    )


#: a window of rounds in which nothing happened
_QUIET = (0,) * WINDOW_ROUNDS


def _slide(window: tuple[int, ...], now: int) -> tuple[int, ...]:
    """A window of the last ``WINDOW_ROUNDS`` rounds with this round's figure; the same
    tuple when nothing moves (a full window of zeros, a quiet node's, stays as it is)."""
    if not now and len(window) == WINDOW_ROUNDS and not any(window):
        return window
    return (*window, now)[-WINDOW_ROUNDS:]


def _pays_after(cost: ReplicaCost) -> str:
    """What a replica must serve to pay, and why."""
    return (
        f"a replica pays after {cost.break_even:.1f} chunk reads (a local write against "
        f"{cost.saving_cycles:.0f} cycles saved per read, margin {cost.margin:g}, {cost.source})"
    )


def _aside(more: int, strikes: int) -> str:
    """How long a node stays aside after replicas that did not pay."""
    then = f" and {more} more" if more else ""
    return f"no new replicas this round{then}, then a probe (strike {strikes})"
