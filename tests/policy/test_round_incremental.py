"""The round's incremental forms decide exactly as the simple forms they replace.

* ``MfcTable.copy`` forks a copy-on-write chunk store (``policy.mfcchunks``) instead of
  copying every chunk: on random reads, agings and forks, each fork answers and ends as a
  deep copy (the simple form) does, and changing one never changes the other;
* SCU rebuilds only the tables of VMs whose chunks, pinning, extras or standing changed
  (``ScuState.built_on``): on random multi-VM rounds, the decision and the next state are
  those of a round that rebuilds every VM's table (``built_on`` emptied).
"""

from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from unicache.model import (
    ChunkAccess,
    ChunkId,
    GuestNode,
    GuestReport,
    Observation,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.mfc import ChunkKey, MfcParams, MfcTable, UnitView
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.scuoptions import scu_options_for
from unicache.topology import Unify

from tests.policy.conftest import sample
from tests.topologies import TOPO_OPTERON_16

KIB = 1024

ops = st.lists(
    st.tuples(
        st.sampled_from(["read", "read", "read", "age", "fork", "switch"]),
        st.sampled_from(["a", "b", "c"]),  # vm
        st.integers(0, 20),  # chunk
        st.sampled_from([8 * KIB, 64 * KIB, 256 * KIB]),  # size
        st.integers(0, 3),  # unit of the reading vCPU
    ),
    max_size=200,
)


def _table() -> MfcTable:
    params = MfcParams(min_read_size=32 * KIB, max_copies=2, migration_cycles=5000)
    return MfcTable(params, [UnitView(i, 512 * KIB, 0, 0.5 * i) for i in range(4)])


def _snapshot(t: MfcTable) -> dict:
    return {
        k: (s.size, sorted(s.units), dict(s.use), dict(s.reads_from), s.migrations)
        for k, s in t.chunks.items()
    }


@settings(max_examples=150, deadline=None)
@given(seq=ops)
def test_forked_tables_behave_as_deep_copies(seq) -> None:
    # the product's tables (forks) and the simple form's (deep copies), side by side
    forks, copies = [_table()], [_table()]
    current = 0
    for op, vm, n, size, unit in seq:
        if op == "fork":
            forks.append(forks[current].copy())
            copies.append(copy.deepcopy(copies[current]))
            current = len(forks) - 1
        elif op == "switch":  # go on changing an older table: its forks must not see it
            current = n % len(forks)
        elif op == "age":
            assert forks[current].update_use(8) == copies[current].update_use(8)
        else:
            key = ChunkKey(vm, ChunkId(n, 0))
            allowed = frozenset({unit, (unit + 1) % 4})
            got = forks[current].mfc_access(key, size, unit, allowed)
            assert got == copies[current].mfc_access(key, size, unit, allowed)
        for fork, simple in zip(forks, copies, strict=True):
            assert _snapshot(fork) == _snapshot(simple)
            assert len(fork.chunks) == len(simple.chunks)
            for u in range(4):
                assert fork.assigned_bytes(u) == simple.assigned_bytes(u)
                assert fork.chunks_on(u) == simple.chunks_on(u)


rounds = st.lists(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # vm
            st.integers(0, 40),  # file (more than the units hold: some go non-caching)
            st.integers(1, 3),  # reads
            st.integers(0, 3),  # vcpu
            st.integers(0, 1),  # home node
        ),
        max_size=40,
    ),
    min_size=1,
    max_size=10,
)


def _vm(i: int) -> Vm:
    name = f"vm{i}"
    vcpus = tuple(Vcpu(VcpuId(name, k), None, frozenset(range(16))) for k in range(4))
    nodes: tuple[GuestNode, ...] = ()
    if i == 1:  # NCC replicates for it
        nodes = (GuestNode(0, frozenset({0, 1}), 1 << 30), GuestNode(1, frozenset({2, 3}), 1 << 30))
    if i == 2:  # SRM colors its streams
        nodes = (
            GuestNode(0, frozenset(range(4)), 1 << 30),
            GuestNode(1, frozenset(), 1 << 30, frozenset({0, 1})),
        )
    return Vm(name, vcpus, 2 << 30, nodes)


@settings(max_examples=40, deadline=None)
@given(seq=rounds, always=st.booleans())
def test_tables_rebuilt_only_where_inputs_changed_decide_as_full_rebuilds(seq, always) -> None:
    # SCU ages every other round: aging changes the tables of VMs that read nothing
    options = replace(scu_options_for(TOPO_OPTERON_16, Unify.LLC), update_period=2)
    if always:  # the daemon's --always-place: SCU places every VM it reads for
        options = replace(options, cost=None, watch=False)
    policy = UnicachePolicy(
        TOPO_OPTERON_16, Unify.LLC, scu_options=options, color_step_aside=not always
    )
    vms = tuple(_vm(i) for i in range(4))
    state = RoundState()
    chunk = 256 * KIB
    for tick, records in enumerate(seq, start=1):
        by_vm: dict[int, dict[ChunkId, ChunkAccess]] = {}
        for v, f, reads, vcpu, home in records:
            cid = ChunkId(f, 0)
            node_reads = ((vcpu // 2, reads),) if v == 1 else ()
            by_vm.setdefault(v, {})[cid] = ChunkAccess(
                cid,
                chunk * reads,
                reads,
                0,
                ((vcpu, chunk * reads),),
                home if v == 1 else -1,
                node_reads,
            )
        reports = tuple(
            GuestReport(f"vm{v}", tick, 1.0, tuple(sorted(acc.values(), key=lambda a: a.chunk)))
            for v, acc in sorted(by_vm.items())
        )
        samples = tuple(sample(vm.name, k, 10**6, busy=0.01) for vm in vms for k in range(4))
        obs = Observation(tick, vms, samples, reports)
        full = replace(state, scu=replace(state.scu, built_on={}))
        decision, new_state = policy.decide(obs, state)
        expected, expected_state = policy.decide(obs, full)
        assert decision == expected
        assert new_state.scu.published == expected_state.scu.published
        assert new_state.scu.versions == expected_state.scu.versions
        assert _snapshot(new_state.scu.table) == _snapshot(expected_state.scu.table)
        state = new_state
