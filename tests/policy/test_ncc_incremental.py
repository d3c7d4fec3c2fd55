"""NCC's round costs what changed (#19): its counters kept with their plain keys and merged
back, a VM's replica nodes handed on while its replicas stay, quiet ledgers kept; none of
it changes a decision, and none of it is saved."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from unicache import policystate
from unicache.model import ChunkId
from unicache.policy.ncc.cache import (
    Age,
    NccParams,
    NccState,
    Read,
    RemoteCount,
    ReplicaKey,
    Write,
    ncc_round,
)
from unicache.policy.ncc.counters import Counters, counter_keys
from unicache.policy.ncc.gain import NodeLedger, quiet, replica_cost_for
from unicache.policy.ncc.replicas import ReplicaState, replicas_round
from unicache.policy.round import RoundState

from tests.policy.test_colors_replicas import _remote, _vm
from tests.topologies import TOPO_OPTERON_242_2NODE


def _key(i: int) -> ReplicaKey:
    return ReplicaKey("vm0", ChunkId(i // 4, i % 4))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 15), st.integers(0, 2), st.integers(1, 5)), max_size=20),
    st.lists(
        st.tuples(st.sampled_from(["put", "drop", "chunk"]), st.integers(0, 15),
                  st.integers(0, 2), st.integers(1, 9)),
        max_size=20,
    ),
)
def test_counters_changed_in_place_are_the_dict_of_them_sorted(
    start: list[tuple[int, int, int]], ops: list[tuple[str, int, int, int]]
) -> None:
    model = {(_key(i), n): c for i, n, c in start}
    base = tuple(sorted(RemoteCount(k, n, c) for (k, n), c in model.items()))
    counters = Counters(base, None)
    for op, i, node, count in ops:
        chunk = ("vm0", i // 4, i % 4)
        if op == "put":
            counters.put(chunk, node, RemoteCount(_key(i), node, count))
            model[(_key(i), node)] = count
        elif op == "drop":
            counters.put(chunk, node, None)
            model.pop((_key(i), node), None)
        else:
            counters.drop_chunk(chunk)
            model = {kn: c for kn, c in model.items() if kn[0] != _key(i)}
        got = counters.get(chunk, node)
        assert (got.count if got else None) == model.get((_key(i), node))
    out, keys = counters.result()
    assert out == tuple(sorted(RemoteCount(k, n, c) for (k, n), c in model.items()))
    assert keys is None or keys == counter_keys(out)  # None: not made (nothing looked up)


def test_a_round_from_a_state_without_its_keys_decides_the_same() -> None:
    # a restored state has no keys (not saved): the round makes them, and decides the same
    events = [Read(_key(i), 1, 0, 10) for i in range(8) for _ in range(i % 3)]
    first = ncc_round(NccState(), (), [*events, Write(_key(2)), Age()], NccParams())
    bare = NccState(first.state.replicas, first.state.counters, first.state.disabled,
                    first.state.clock)
    assert bare.counter_keys is None and first.state.counter_keys is not None
    more = [Read(_key(i), 1, 0, 10) for i in range(4, 12)] + [Age()]
    assert ncc_round(first.state, (), more, NccParams()) == ncc_round(bare, (), more, NccParams())


def test_replica_nodes_are_handed_on_while_the_replicas_stay_and_never_saved() -> None:
    vm = _vm(colored=0, cpu_nodes=2)
    made = replicas_round([vm], [_remote("vm0", ChunkId(5, 0), 0, 1, 2)], ReplicaState(),
                          NccParams())
    assert made.replica_nodes["vm0"] == {ChunkId(5, 0): frozenset({1})}
    again = replicas_round([vm], [], made.state, NccParams())
    assert again.replica_nodes["vm0"] is made.replica_nodes["vm0"]
    state = RoundState(replicas=again.state)
    back = policystate.decode(json.loads(json.dumps(policystate.encode(state))))
    assert back == state and back.replicas.vms[0].nodes is None
    assert back.replicas.vms[0].ncc.counter_keys is None
    # after a restart the nodes are derived again
    later = replicas_round([vm], [], back.replicas, NccParams())
    assert later.replica_nodes == again.replica_nodes


def test_quiet_ledgers_are_those_predict_and_judge_keep() -> None:
    cost = replica_cost_for(TOPO_OPTERON_242_2NODE, 1 << 20)
    still = tuple(NodeLedger(n, (0,) * 8, (0,) * 8, (0,) * 8) for n in (0, 1))
    assert quiet(still, (0, 1), cost)
    assert not quiet(still[:1], (0, 1), cost)  # a node without a ledger yet
    assert not quiet((NodeLedger(0, (0,) * 8, (0,) * 8, (0,) * 8, aside=1), still[1]),
                     (0, 1), cost)
    assert not quiet((NodeLedger(0, (0,) * 7, (0,) * 8, (0,) * 8), still[1]), (0, 1), cost)
