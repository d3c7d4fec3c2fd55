"""NCC over guest reports: which guest NUMA nodes keep a replica of each chunk.

:mod:`unicache.policy.ncc.cache` is the dual-layered file cache's §3.2 over read events. This
module turns guest reports into those events, one NCC instance per VM (guest node ids
of different VMs are unrelated):

* a chunk record's ``home_node`` is the node of its primary page-cache copy and its
  ``node_reads`` the reads per reading node: each becomes that many ``Read`` events (at
  most ``max_reads_per_record``, so a guest cannot buy unbounded policy work);
* a chunk record with writes, and every chunk of a file the agent saw modified without
  the shim, becomes a ``Write`` after the reads: every replica of it is dropped (§3.2
  "Cache Coherence");
* the report's free memory per node drives the §3.2 timer (generation off when tight);
* one ``Age`` per round (MQ aging), then a ``Reclaim`` of the replicas a tight node lacks
  (the agent's 2:1 shrink, :func:`~unicache.policy.ncc.memory.shrink_reclaims`), so the
  host's table stops listing the replicas the agent gave back;
* bounded: at most ``MAX_READS_PER_ROUND`` reads per VM and round, and the
  ``MAX_COUNTERS_PER_VM`` largest remote-read counters are kept; a write costs something
  only for a chunk NCC knows (a replica, a counter, a read this round), the others are
  no-ops and are not replayed, so writes are bounded by what NCC holds;
* the guest's nodes are the backend's (QEMU's ``--numa`` layout, libvirt's ``<numa>``),
  never a report's: a guest that claims nodes it does not have gets no NCC, and a read
  naming a node the VM lacks is dropped;
* every drop is counted, in one ``NCC_BOUNDED`` refusal per VM and round: read events
  (over the budget, or naming a node the VM lacks), counters trimmed, writes not replayed;
* never slower (:mod:`unicache.policy.ncc.gain`): a node whose replicas miss more of the
  other nodes' chunks than they can hold, or whose dropped replicas served fewer reads
  than the topology says pay for their copies, makes no new ones, and an ``NCC_NO_GAIN``
  refusal says why;
* chunks whose page cache is on a colored node are left alone: SRM-buffer confined them
  there on purpose (a colored node's memory is on the VM's own host node, so it is not
  remote), and a replica would spread them over every color again.

Pure: no I/O, no clock; the same state and observation give the same decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from unicache.model import (
    ChunkAccess,
    ChunkId,
    DropReplica,
    GuestReport,
    NodeMemory,
    Refusal,
    Replicate,
    Vm,
)
from unicache.policy.ncc import cache as ncc
from unicache.policy.ncc.gain import (
    NCC_NO_GAIN,
    GainVerdict,
    NodeLedger,
    ReplicaCost,
    judge,
    predict,
    quiet,
    remote_chunks,
)
from unicache.policy.ncc.memory import budgeted, shrink_reclaims

#: at most this many Read events per chunk record and node
MAX_READS_PER_RECORD = 4
#: at most this many Read events per VM and round (a guest cannot buy unbounded work)
MAX_READS_PER_ROUND = 16_384
#: remote-read counters kept per VM (the most counted first): NCC's memory is bounded
MAX_COUNTERS_PER_VM = 16_384
#: refusal kind: guest input NCC dropped: read events (a node the VM lacks, over the
#: budget), remote-read counters over ``MAX_COUNTERS_PER_VM``, writes not replayed
NCC_BOUNDED = "NCC_BOUNDED"


@dataclass(frozen=True, slots=True)
class VmReplicas:
    """NCC's state for one VM.

    :param vm: the VM.
    :param ncc: the policy's state.
    :param memory: the guest nodes' free memory from the last report that had it.
    :param gain: per node, what its replicas served before they were dropped, and whether
        NCC steps aside there (:mod:`unicache.policy.ncc.gain`).
    """

    vm: str
    ncc: ncc.NccState = field(default_factory=ncc.NccState)
    memory: tuple[NodeMemory, ...] = ()
    gain: tuple[NodeLedger, ...] = ()
    #: per replicated chunk, the nodes holding it: derived from ``ncc.replicas`` once, then
    #: handed on while they stay (so is the map SCU's tables compare); not saved, not
    #: compared (None: not derived yet, as after a restart)
    nodes: Mapping[ChunkId, frozenset[int]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def with_nodes(self, nodes: Mapping[ChunkId, frozenset[int]]) -> VmReplicas:
        """This state, new, with its replicas' nodes derived (set once, before it is seen)."""
        object.__setattr__(self, "nodes", nodes)
        return self


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """NCC's state for every VM with more than one guest node, sorted by VM.

    :param vms: per-VM states.
    """

    vms: tuple[VmReplicas, ...] = ()

    def of(self, vm: str) -> VmReplicas | None:
        """The state of one VM, if it has one."""
        return next((v for v in self.vms if v.vm == vm), None)


@dataclass(frozen=True, slots=True)
class ReplicaDecision:
    """What one round decided.

    :param actions: replicas made and dropped, in order.
    :param replica_nodes: per VM, the nodes holding a replica of each replicated chunk.
    :param state: the state after the round.
    :param refusals: per VM, the guest input dropped (read events, counters, writes) and why.
    """

    actions: tuple[Replicate | DropReplica, ...]
    replica_nodes: Mapping[str, Mapping[ChunkId, frozenset[int]]]
    state: ReplicaState = field(default_factory=ReplicaState)
    refusals: tuple[Refusal, ...] = ()


def _events(
    vm: str,
    reports: list[GuestReport],
    known: ncc.NccState,
    max_reads: int,
    nodes: frozenset[int],
    colored: frozenset[int] = frozenset(),
) -> tuple[list[ncc.NccEvent], int, int]:
    """The VM's reads, then its writes, then aging; the read events dropped, and the write
    records not replayed (a chunk, or a modified file, of which NCC knows nothing)."""
    reads: list[ncc.NccEvent] = []
    written: set[ncc.ReplicaKey] = set()
    modified: set[int] = set()
    dropped = 0
    for report in sorted(reports, key=lambda r: r.seq):
        modified |= report.modified_files
        # only the records NCC replays (a read with a home node, a write), in chunk order
        # (the plain chunk's, ChunkId's own): most of a fleet's records are neither
        replayed = [a for a in report.chunks if a.home_node >= 0 or a.writes > 0]
        for access in sorted(replayed, key=_chunk_order):
            key = ncc.ReplicaKey(vm, access.chunk)
            if access.home_node >= 0 and access.home_node not in colored:
                for node, count in access.node_reads:
                    wanted = min(count, max_reads)
                    if access.home_node not in nodes or node not in nodes:
                        dropped += wanted
                        continue
                    n = min(wanted, MAX_READS_PER_ROUND - len(reads))
                    dropped += wanted - n
                    # the node's share of the record's bytes, over the events standing for it
                    nbytes = access.bytes_read * count // max(access.reads, count, 1)
                    reads += [ncc.Read(key, node, access.home_node, nbytes // max(n, 1))] * n
            if access.writes > 0:
                written.add(key)
    if not written and not modified:  # nothing written: no pass over what NCC holds
        return [*reads, ncc.Age()], dropped, 0
    # a write matters only for a chunk NCC knows; §3.2 coherence for writers without the
    # shim: every known chunk of a modified file
    held = {r.key for r in known.replicas} | {c.key for c in known.counters}
    held |= {e.key for e in reads if isinstance(e, ncc.Read)}
    writes = [ncc.Write(k) for k in sorted(held) if k in written or k.chunk.file_id in modified]
    unknown = len(written - held) + len(modified - {k.chunk.file_id for k in held})
    return [*reads, *writes, ncc.Age()], dropped, unknown


def _chunk_order(access: ChunkAccess) -> tuple[int, int]:
    return (access.chunk.file_id, access.chunk.index)


def replicas_round(
    vms: Iterable[Vm],
    reports: Iterable[GuestReport],
    state: ReplicaState,
    params: ncc.NccParams,
    max_reads: int = MAX_READS_PER_RECORD,
    chunk_size: int = 0,
    cost: ReplicaCost | None = None,
) -> ReplicaDecision:
    """One round of NCC for every VM whose guest has more than one NUMA node.

    1. The VM's reports become reads (home node, reading node), then writes, then aging,
       then (with ``chunk_size``) a reclaim on each node short of free memory (2:1 shrink).
    2. :func:`~unicache.policy.ncc.cache.ncc_round` decides replicas on the VM's nodes, with
       generation off on nodes short of free memory.
    3. Replicas made and dropped become actions; the live replicas go into the tables.
    4. With ``cost``, what the dropped replicas served is judged per node
       (:mod:`~unicache.policy.ncc.gain`): a node whose remotely-read working set
       overflows its replicas, or whose dropped replicas did not pay, makes no new ones
       (step 2's ``aside``), and an ``NCC_NO_GAIN`` refusal says why.

    :param vms: the managed VMs.
    :param reports: this round's guest reports.
    :param state: the state after the previous round.
    :param params: NCC's parameters.
    :param max_reads: the most Read events per chunk record and node.
    :param chunk_size: bytes per chunk: a node holds no more replicas than the guest
        agent's budget takes (:func:`~unicache.policy.ncc.memory.budgeted`; 0: no cap
        beyond ``params``).
    :param cost: what a replica costs and saves on this machine
        (:func:`~unicache.policy.ncc.gain.replica_cost_for`; None: NCC never steps aside).
    :returns: the actions, every replicated chunk's nodes, and the new state.
    """
    by_vm: dict[str, list[GuestReport]] = {}
    for report in reports:
        by_vm.setdefault(report.vm, []).append(report)
    out: list[VmReplicas] = []
    actions: list[Replicate | DropReplica] = []
    refusals: list[Refusal] = []
    nodes: dict[str, Mapping[ChunkId, frozenset[int]]] = {}
    before = {v.vm: v for v in state.vms}  # one lookup per VM, not a scan (a fleet's VMs)
    given = _Given(params, max_reads, chunk_size, cost, {})
    for vm in sorted(vms, key=lambda v: v.name):
        known = before.get(vm.name)
        if len(vm.nodes) < 2 and (known is None or not known.ncc.replicas):
            continue  # one guest node and no replica: nothing for NCC (a fleet's most VMs)
        step = _vm_round(vm, by_vm.get(vm.name, []), known, given)
        if step is None:
            continue
        replicas, vm_nodes, changed, said = step
        actions += changed
        refusals += said
        nodes[vm.name] = vm_nodes
        out.append(replicas)
    return ReplicaDecision(tuple(actions), nodes, ReplicaState(tuple(out)), tuple(refusals))


@dataclass(frozen=True, slots=True)
class _Given:
    """What every VM's round is given: NCC's parameters, the bounds, the machine's cost,
    and the parameters made per size of guest nodes (shared by the VMs alike)."""

    params: ncc.NccParams
    max_reads: int
    chunk_size: int
    cost: ReplicaCost | None
    budgets: dict[tuple[int, ...], ncc.NccParams]


def _vm_round(
    vm: Vm, mine: list[GuestReport], known: VmReplicas | None, given: _Given
) -> (
    tuple[
        VmReplicas, Mapping[ChunkId, frozenset[int]], list[Replicate | DropReplica], list[Refusal]
    ]
    | None
):
    """One VM's round (:func:`replicas_round`'s steps 1-4): its replicas after, its chunks'
    nodes, the replicas made and dropped, and the refusals; ``None``: nothing for NCC."""
    guest_nodes = frozenset(n.node for n in vm.nodes)  # the backend's, not the guest's
    prev = known or VmReplicas(vm.name)
    if len(guest_nodes) < 2 and not prev.ncc.replicas:
        return None
    memory = next((r.node_memory for r in reversed(mine) if r.node_memory), prev.memory)
    memory = tuple(m for m in memory if m.node in guest_nodes)
    colored = frozenset(n.node for n in vm.colored_nodes())
    events, dropped, unknown = _events(
        vm.name, mine, prev.ncc, given.max_reads, guest_nodes, colored
    )
    vm_params = _vm_params(vm, memory, given.params, given.chunk_size, given.budgets)
    latest = next((r.node_memory for r in reversed(mine) if r.node_memory), ())
    fresh = [m for m in latest if m.node in guest_nodes]
    if given.chunk_size > 0 and prev.ncc.replicas and fresh:
        # the agent's shrink, after aging as in its round, for memory reported this
        # round only (a silent guest's old figure would shrink it again every round);
        # no new replica is made on a tight node, so only older ones are given back
        events += shrink_reclaims(fresh, vm_params, given.chunk_size)
    cost = given.cost
    verdict = GainVerdict(prev.gain)
    remote = {} if cost is None else remote_chunks(events, prev.ncc, prev.nodes)
    # a VM that has read nothing remote for a window keeps its ledgers as they are
    steady = cost is not None and not remote and quiet(prev.gain, guest_nodes, cost)
    if cost is not None and not steady:
        verdict = predict(
            prev.gain,
            remote,
            guest_nodes,
            vm_params.max_replicas_per_node,
            vm_params.ncc_threshold,
            cost,
        )
    if len(events) == 1:
        # only the aging (the VM read and wrote nothing NCC replays): ncc_round would
        # hand its state back aged, with the clock one on; the replicas at frequency
        # one, most of them, stay as they are (and so does a tuple of only those)
        tight = ncc.memory_tight_nodes(memory, vm_params)
        decision = ncc.NccDecision((), (), ncc.aged(prev.ncc, tight))
    else:
        decision = ncc.ncc_round(prev.ncc, memory, events, vm_params, verdict.aside)
    kept = decision.state
    trimmed = len(kept.counters) - MAX_COUNTERS_PER_VM
    if trimmed > 0:
        most = sorted(kept.counters, key=lambda c: (-c.count, c.key, c.node))
        kept = replace(kept, counters=tuple(sorted(most[:MAX_COUNTERS_PER_VM])))
    refusals: list[Refusal] = []
    why = _bounded(vm.name, sorted(guest_nodes), dropped, max(trimmed, 0), unknown)
    if why:
        refusals.append(Refusal(NCC_BOUNDED, why))
    if cost is not None and not (steady and not decision.retired):
        judged = judge(verdict, decision.retired, cost)
        why = "; ".join(verdict.reasons + judged.reasons)
        if why:
            refusals.append(Refusal(NCC_NO_GAIN, f"NCC makes no replicas for {vm.name}: {why}"))
        verdict = judged
    # ReclaimPrimary: the guest kernel reclaims its own page cache; nothing to send
    changed = [a for a in decision.actions if isinstance(a, Replicate | DropReplica)]
    vm_nodes = prev.nodes
    if vm_nodes is None:
        vm_nodes = _nodes_of(kept.replicas)  # (a restart)
    elif changed:
        vm_nodes = _nodes_after(vm_nodes, changed)  # replicas made or dropped
    replicas = VmReplicas(vm.name, kept, tuple(memory), verdict.ledgers).with_nodes(vm_nodes)
    return replicas, vm_nodes, changed, refusals


def _vm_params(
    vm: Vm,
    memory: tuple[NodeMemory, ...],
    params: ncc.NccParams,
    chunk_size: int,
    budgets: dict[tuple[int, ...], ncc.NccParams],
) -> ncc.NccParams:
    """NCC's parameters for one VM: a node's replicas capped by the agent's budget on the
    VM's smallest node with vCPUs (its guest's own count if reported, else the backend's).
    ``budgets`` keeps them by node sizes for the round (a fleet's VMs share a few)."""
    if chunk_size <= 0:
        return params
    readers = {n.node: n.memory_bytes for n in vm.nodes if n.vcpus}
    reported = {m.node: m.total_bytes for m in memory if m.node in readers}
    sizes = tuple({**readers, **reported}.values())
    if sizes not in budgets:
        budgets[sizes] = budgeted(params, sizes, chunk_size)
    return budgets[sizes]


def _nodes_of(replicas: tuple[ncc.Replica, ...]) -> dict[ChunkId, frozenset[int]]:
    """The nodes holding each replicated chunk of one VM, from its replicas sorted by chunk
    (a chunk's replicas are next to each other: its ChunkId is hashed once)."""
    out: dict[ChunkId, frozenset[int]] = {}
    chunk: ChunkId | None = None
    nodes: list[int] = []
    for r in replicas:
        this = r.key.chunk
        if chunk is not None and this.index == chunk.index and this.file_id == chunk.file_id:
            nodes.append(r.node)
            continue
        if chunk is not None:
            out[chunk] = frozenset(nodes)
        chunk, nodes = this, [r.node]
    if chunk is not None:
        out[chunk] = frozenset(nodes)
    return out


def _nodes_after(
    before: Mapping[ChunkId, frozenset[int]], changed: list[Replicate | DropReplica]
) -> dict[ChunkId, frozenset[int]]:
    """The nodes holding each replicated chunk after the replicas made and dropped, in
    order (a new map: the one before may be a table's still)."""
    out = dict(before)
    for action in changed:
        held = out.get(action.chunk, frozenset())
        if isinstance(action, Replicate):
            out[action.chunk] = held | {action.node}
        elif held - {action.node}:
            out[action.chunk] = held - {action.node}
        else:
            out.pop(action.chunk, None)
    return out


def _bounded(vm: str, nodes: list[int], reads: int, counters: int, writes: int) -> str:
    """The ``NCC_BOUNDED`` line of one VM and round ("" when NCC dropped nothing)."""
    parts = []
    if reads:
        parts.append(
            f"{reads} read events (nodes it does not have, it has {nodes}, or over "
            f"{MAX_READS_PER_ROUND} a round)"
        )
    if counters:
        parts.append(
            f"{counters} remote-read counters (over the {MAX_COUNTERS_PER_VM} it keeps, "
            "the least counted)"
        )
    if writes:
        parts.append(f"{writes} writes not replayed (chunks or files it holds nothing for)")
    return f"NCC dropped input of {vm}: {'; '.join(parts)}" if parts else ""
