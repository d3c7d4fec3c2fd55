"""NCC replicas (dual-layered-file-cache-ccnuma.md §3.2): generation, MQ, reclaim, coherence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unicache.errors import StateError
from unicache.model import ChunkId, DropReplica, NodeMemory, Replicate
from unicache.policy.ncc.cache import (
    MQ_QUEUES,
    NCC_THRESHOLD,
    RULE_MQ_EVICT,
    RULE_PRIMARY_RECLAIMED,
    RULE_RECLAIM,
    RULE_REPLICATE,
    RULE_WRITE,
    Age,
    NccDecision,
    NccEvent,
    NccParams,
    NccPolicy,
    NccState,
    PrimaryReclaimed,
    Read,
    Reclaim,
    ReclaimPrimary,
    Replica,
    ReplicaKey,
    Write,
    mq_order,
    ncc_round,
)

GIB = 1 << 30
PLENTY = (NodeMemory(0, GIB, 2 * GIB), NodeMemory(1, GIB, 2 * GIB))
TIGHT_ON_1 = (NodeMemory(0, GIB, 2 * GIB), NodeMemory(1, GIB // 100, 2 * GIB))


def key(i: int, vm: str = "a") -> ReplicaKey:
    return ReplicaKey(vm, ChunkId(1, i))


def remote(i: int, node: int = 1, home: int = 0) -> Read:
    return Read(key(i), node, home)


def run(
    events: list[NccEvent],
    memory: tuple[NodeMemory, ...] = PLENTY,
    params: NccParams | None = None,
    state: NccState | None = None,
) -> NccDecision:
    return ncc_round(state or NccState(), memory, events, params or NccParams())


def test_paper_threshold_is_two_remote_reads() -> None:
    assert NCC_THRESHOLD == 2
    assert MQ_QUEUES == 8


def test_second_remote_read_from_the_same_node_makes_a_replica() -> None:
    one = run([remote(0)])
    assert one.actions == ()
    two = run([remote(0), remote(0)])
    assert two.actions == (Replicate("a", ChunkId(1, 0), 1, RULE_REPLICATE, two.actions[0].reason),)
    assert RULE_REPLICATE in two.actions[0].reason
    assert two.state.replica_nodes(key(0)) == {1}


def test_later_reads_on_that_node_are_served_by_the_replica() -> None:
    d = run([remote(0), remote(0), remote(0)])
    assert d.served == (0, 0, 1)


def test_local_reads_never_replicate() -> None:
    d = run([Read(key(0), 0, 0)] * 5)
    assert d.actions == () and d.served == (0,) * 5


def test_reads_from_different_nodes_count_separately() -> None:
    d = run([Read(key(0), 1, 0), Read(key(0), 2, 0)])
    assert d.actions == ()


def test_replication_is_off_on_a_node_with_little_free_memory() -> None:
    d = run([remote(0), remote(0), Read(key(1), 0, 1), Read(key(1), 0, 1)], memory=TIGHT_ON_1)
    made = [(ReplicaKey.of(a), a.node) for a in d.actions if isinstance(a, Replicate)]
    assert made == [(key(1), 0)]
    assert len(d.actions) == 1
    assert d.state.disabled == {1}


def test_write_drops_every_replica_and_resets_counters() -> None:
    events: list[NccEvent] = [remote(0, node=1), remote(0, node=1)]
    events += [Read(key(0), 2, 0), Read(key(0), 2, 0), Read(key(0), 3, 0), Write(key(0))]
    d = run(events)
    drops = [a for a in d.actions if isinstance(a, DropReplica)]
    assert sorted(a.node for a in drops) == [1, 2]
    assert all(a.rule == RULE_WRITE for a in drops)
    assert d.state.replica_nodes(key(0)) == frozenset()
    assert d.state.counters == ()  # node 3's one read was forgotten too
    again = run([Read(key(0), 3, 0)], state=d.state)
    assert again.actions == ()


def test_primary_reclaim_drops_all_its_replicas() -> None:
    d = run([remote(0), remote(0), PrimaryReclaimed(key(0))])
    assert isinstance(d.actions[-1], DropReplica)
    assert d.actions[-1].rule == RULE_PRIMARY_RECLAIMED
    assert d.state.replicas == ()


def test_reclaim_takes_two_replicas_for_each_primary_page() -> None:
    events: list[NccEvent] = [e for i in range(5) for e in (remote(i), remote(i))]
    d = run([*events, Reclaim(1, 3)])
    tail = d.actions[5:]
    assert [type(a) for a in tail] == [DropReplica, DropReplica, ReclaimPrimary]
    assert all(RULE_RECLAIM in a.reason for a in tail)
    assert isinstance(tail[2], ReclaimPrimary) and tail[2].pages == 1
    assert len(d.state.replicas) == 3


def test_reclaim_with_too_few_replicas_asks_the_primary_cache_for_the_rest() -> None:
    d = run([remote(0), remote(0), Reclaim(1, 6)])
    assert isinstance(d.actions[-1], ReclaimPrimary) and d.actions[-1].pages == 5


def test_mq_queue_of_a_replica_follows_log2_of_its_frequency() -> None:
    r = [Replica(key(0), 1, f, 0).queue for f in (1, 2, 3, 4, 7, 8, 200, 10_000)]
    assert r == [0, 1, 1, 2, 2, 3, 7, 7]


def test_full_node_evicts_the_mq_victim_lowest_queue_then_lru() -> None:
    params = NccParams(max_replicas_per_node=2)
    events: list[NccEvent] = [remote(0), remote(0), remote(1), remote(1)]
    events += [remote(0), remote(0)]  # chunk 0 hit twice -> freq 3, Q_1; chunk 1 stays Q_0
    events += [remote(2), remote(2)]
    d = run(events, params=params)
    evicted = [a for a in d.actions if isinstance(a, DropReplica)]
    assert [(ReplicaKey.of(a), a.rule) for a in evicted] == [(key(1), RULE_MQ_EVICT)]
    assert {r.key for r in d.state.replicas} == {key(0), key(2)}


def test_aging_lowers_frequency_but_never_below_one() -> None:
    d = run([remote(0), remote(0), remote(0), remote(0), Age(), Age(), Age()])
    assert [r.freq for r in d.state.replicas] == [1]


def test_start_rejects_more_replicas_than_the_node_holds() -> None:
    state = run([remote(0), remote(0), remote(1), remote(1)]).state
    NccPolicy().start(state)
    with pytest.raises(StateError, match="invariant 1"):
        NccPolicy(NccParams(max_replicas_per_node=1)).start(state)


def test_mq_order_is_queue_then_recency() -> None:
    a, b, c = Replica(key(0), 1, 4, 1), Replica(key(1), 1, 1, 5), Replica(key(2), 1, 1, 2)
    assert mq_order([a, b, c]) == (c, b, a)


# --- properties ---------------------------------------------------------------------------

NODES = 3


def _read(chunk: int, node: int) -> Read:
    return Read(key(chunk), node, chunk % 2)  # a chunk's primary copy stays on one node


read_st = st.builds(_read, st.integers(0, 3), st.integers(0, NODES - 1))
chunk_st = st.builds(key, st.integers(0, 3))
event_st = st.one_of(
    read_st,  # reads are most of the traffic, so replicas do get made
    read_st,
    read_st,
    read_st,
    st.builds(Write, chunk_st),
    st.builds(PrimaryReclaimed, chunk_st),
    st.builds(Reclaim, st.integers(0, NODES - 1), st.integers(0, 4)),
    st.just(Age()),
)
rounds_st = st.lists(
    st.tuples(
        st.lists(st.integers(0, 100), min_size=NODES, max_size=NODES),  # free %
        st.lists(event_st, max_size=30),
    ),
    max_size=5,
)
params_st = st.builds(NccParams, st.integers(1, 3), st.just(0.10), st.integers(0, 4))


def _memory(free_pct: list[int]) -> tuple[NodeMemory, ...]:
    return tuple(NodeMemory(n, pct, 100) for n, pct in enumerate(free_pct))


@settings(max_examples=150, deadline=None)
@given(rounds_st, params_st)
def test_no_read_is_ever_served_by_a_stale_replica(
    rounds: list[tuple[list[int], list[NccEvent]]], params: NccParams
) -> None:
    # The caller copies the primary's current data when it makes a replica; a write bumps
    # the primary's version. One event per call so every action belongs to its event.
    version: dict[ReplicaKey, int] = {}
    copied: dict[tuple[ReplicaKey, int], int] = {}
    state = NccState()
    for free, events in rounds:
        for ev in events:
            d = ncc_round(state, _memory(free), [ev], params)
            if isinstance(ev, Write):
                version[ev.key] = version.get(ev.key, 0) + 1
            if isinstance(ev, Read) and d.served[0] != ev.home:
                assert copied[(ev.key, d.served[0])] == version.get(ev.key, 0), "stale read"
            for act in d.actions:
                if isinstance(act, Replicate):
                    copied[(ReplicaKey.of(act), act.node)] = version.get(ReplicaKey.of(act), 0)
                elif isinstance(act, DropReplica):
                    del copied[(ReplicaKey.of(act), act.node)]
            assert set(copied) == {(r.key, r.node) for r in d.state.replicas}
            for r in d.state.replicas:
                assert copied[(r.key, r.node)] == version.get(r.key, 0), "stale replica kept"
            state = d.state


@settings(max_examples=50, deadline=None)
@given(rounds_st, params_st)
def test_replicas_only_after_threshold_only_off_home_and_never_under_pressure(
    rounds: list[tuple[list[int], list[NccEvent]]], params: NccParams
) -> None:
    state = NccState()
    for free, events in rounds:
        d = ncc_round(state, _memory(free), events, params)
        tight = {n for n, pct in enumerate(free) if pct < 10}
        homes = {ev.key: ev.home for ev in events if isinstance(ev, Read)}
        for act in d.actions:
            if isinstance(act, Replicate):
                assert act.node not in tight
                assert act.node != homes[ReplicaKey.of(act)]
                reads = int(act.reason.split(": ")[1].split(" reads")[0])
                assert reads >= params.ncc_threshold  # counting goes on while memory is tight
        state = d.state


@settings(max_examples=50, deadline=None)
@given(rounds_st, params_st)
def test_replica_count_is_bounded(
    rounds: list[tuple[list[int], list[NccEvent]]], params: NccParams
) -> None:
    state = NccState()
    for free, events in rounds:
        state = ncc_round(state, _memory(free), events, params).state
        for node in range(NODES):
            assert sum(r.node == node for r in state.replicas) <= params.max_replicas_per_node
        for r in state.replicas:
            assert len(state.replica_nodes(r.key)) <= NODES - 1
        NccPolicy(params).start(state)  # every invariant holds after every round


@settings(max_examples=40, deadline=None)
@given(rounds_st, params_st)
def test_same_inputs_give_same_decisions(
    rounds: list[tuple[list[int], list[NccEvent]]], params: NccParams
) -> None:
    a = b = NccState()
    for free, events in rounds:
        da = ncc_round(a, _memory(free), events, params)
        db = ncc_round(b, _memory(list(free)), list(events), params)
        assert da == db
        a, b = da.state, db.state


@settings(max_examples=150, deadline=None)
@given(rounds_st, params_st, st.lists(st.integers(0, 100), min_size=NODES, max_size=NODES))
def test_an_aging_alone_hands_a_state_without_replicas_back_with_the_clock_on(
    rounds: list[tuple[list[int], list[NccEvent]]], params: NccParams, free: list[int]
) -> None:
    # replicas_round skips ncc_round for a VM with only the aging to replay and no replica
    # (policy.ncc.replicas): that must be what ncc_round does with such a state
    state = NccState()
    for before, events in rounds:
        state = ncc_round(state, _memory(before), events, params).state
    state = NccState((), state.counters, state.disabled, state.clock)  # no replica
    tight = frozenset(n for n, pct in enumerate(free) if pct < 10)
    expected = NccDecision((), (), NccState((), state.counters, tight, state.clock + 1))
    assert ncc_round(state, _memory(free), [Age()], params) == expected
