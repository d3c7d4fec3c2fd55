"""NCC's replica index and counters are handed from round to round (#19): a round takes
over the ones its input state holds, or builds them from the state's tuples; either way
it decides the same, a second round from one state (or a copy of it) never sees the first
round's changes, and neither is ever saved."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from unicache import policystate
from unicache.model import ChunkId, DropReplica, Replicate
from unicache.policy.ncc.cache import (
    Age,
    NccEvent,
    NccParams,
    NccState,
    PrimaryReclaimed,
    Read,
    Reclaim,
    ReplicaKey,
    Write,
    aged,
    ncc_round,
)
from unicache.policy.ncc.gain import remote_chunks
from unicache.policy.ncc.replicas import ReplicaState, _nodes_after, _nodes_of, replicas_round
from unicache.policy.round import RoundState

from tests.policy.test_colors_replicas import _remote, _vm

PARAMS = NccParams(max_replicas_per_node=3)


def _key(i: int) -> ReplicaKey:
    return ReplicaKey("vm0", ChunkId(i // 3, i % 3))


def _bare(state: NccState) -> NccState:
    """The same state without what it hands on (as after a restart)."""
    return NccState(state.replicas, state.counters, state.disabled, state.clock)


_EVENT = st.one_of(
    st.builds(lambda i, node, n: [Read(_key(i), node, 0, 10)] * n,
              st.integers(0, 11), st.integers(0, 2), st.integers(1, 4)),
    st.builds(lambda i: [Write(_key(i))], st.integers(0, 11)),
    st.builds(lambda i: [PrimaryReclaimed(_key(i))], st.integers(0, 11)),
    st.builds(lambda node, pages: [Reclaim(node, pages)], st.integers(1, 2), st.integers(1, 3)),
    st.just([Age()]),
)
_ROUNDS = st.lists(st.lists(_EVENT, max_size=12), min_size=1, max_size=8)


def _flatten(round_events: list[list[NccEvent]]) -> list[NccEvent]:
    return [ev for group in round_events for ev in group]


@settings(max_examples=150, deadline=None)
@given(_ROUNDS)
def test_rounds_on_a_handed_index_decide_what_rounds_from_the_tuples_decide(
    rounds: list[list[list[NccEvent]]],
) -> None:
    handed = rebuilt = NccState()
    for round_events in rounds:
        events = _flatten(round_events)
        if events == [Age()]:  # the aging alone: what replicas_round runs for it
            want = ncc_round(_bare(rebuilt), (), events, PARAMS).state
            assert aged(_bare(handed), frozenset()) == want  # an index built first
            got = aged(handed, frozenset())
            assert got == want
            handed, rebuilt = got, want
            continue
        got_decision = ncc_round(handed, (), events, PARAMS)
        want_decision = ncc_round(_bare(rebuilt), (), events, PARAMS)
        assert got_decision == want_decision
        handed, rebuilt = got_decision.state, want_decision.state
        held = handed.index
        assert held is not None and held.token is handed.replicas
        counters = handed.counter_index
        assert counters is not None and counters.token is handed.counters
        assert handed.replicas == tuple(
            sorted(r for per_node in held.by_chunk.values() for r in per_node.values())
        )


@settings(max_examples=80, deadline=None)
@given(_ROUNDS, st.lists(_EVENT, max_size=12), st.lists(_EVENT, max_size=12))
def test_a_second_round_from_one_state_or_its_copy_builds_its_own_index(
    rounds: list[list[list[NccEvent]]], one: list[list[NccEvent]], other: list[list[NccEvent]]
) -> None:
    state = NccState()
    for round_events in rounds:
        state = ncc_round(state, (), _flatten(round_events), PARAMS).state
    twin = copy.copy(state)  # shares the index until a round takes it over
    expected = ncc_round(_bare(state), (), _flatten(other), PARAMS)
    ncc_round(state, (), _flatten(one), PARAMS)  # takes the index over, changes it
    assert state.index is None
    assert ncc_round(state, (), _flatten(other), PARAMS) == expected
    assert ncc_round(twin, (), _flatten(other), PARAMS) == expected


def test_the_index_is_never_saved_and_a_restored_state_decides_the_same() -> None:
    vm = _vm(colored=0, cpu_nodes=2)
    made = replicas_round([vm], [_remote("vm0", ChunkId(5, 0), 0, 1, 2)], ReplicaState(),
                          NccParams())
    assert made.state.vms[0].ncc.index is not None
    state = RoundState(replicas=made.state)
    back = policystate.decode(json.loads(json.dumps(policystate.encode(state))))
    assert back == state and back.replicas.vms[0].ncc.index is None
    assert back.replicas.vms[0].ncc.counter_index is None
    report = [_remote("vm0", ChunkId(5, 0), 0, 1, 3), _remote("vm0", ChunkId(6, 0), 0, 1, 2)]
    assert replicas_round([vm], report, back.replicas, NccParams()) == replicas_round(
        [vm], report, made.state, NccParams()
    )


@settings(max_examples=80, deadline=None)
@given(_ROUNDS, st.lists(_EVENT, max_size=12))
def test_replica_nodes_after_the_actions_are_those_of_the_replicas(
    rounds: list[list[list[NccEvent]]], last: list[list[NccEvent]]
) -> None:
    state = NccState()
    for round_events in rounds:
        state = ncc_round(state, (), _flatten(round_events), PARAMS).state
    before = _nodes_of(state.replicas)
    events = _flatten(last)
    # remote reads looked up in the nodes map count what a pass over the replicas counts
    assert remote_chunks(events, state, before) == remote_chunks(events, state)
    decision = ncc_round(state, (), events, PARAMS)
    changed = [a for a in decision.actions if isinstance(a, Replicate | DropReplica)]
    assert _nodes_after(before, changed) == _nodes_of(decision.state.replicas)
