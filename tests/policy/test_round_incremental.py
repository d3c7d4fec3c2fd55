"""The round's incremental forms decide exactly as the simple forms they replace.

* ``MfcTable.copy`` forks a copy-on-write chunk store (``policy.scu.mfc_chunks``) instead of
  copying every chunk: on random reads, agings and forks, each fork answers and ends as a
  deep copy (the simple form) does, and changing one never changes the other;
* SCU rebuilds only the tables of VMs whose chunks, pinning, extras or standing changed
  (``ScuState.built_on``): on random multi-VM rounds, the decision and the next state are
  those of a round that rebuilds every VM's table (``built_on`` emptied).
"""

from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import example, given, settings
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
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import ChunkKey, ChunkState, MfcParams, UnitView, use_pairs
from unicache.policy.scu.options import scu_options_for
from unicache.policy.scu.policy import ScuState
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
# a chunk aged since its last read holds the shared empty reads map, which a deep copy
# of the table must copy (it could not while that map was a MappingProxyType)
@example(
    seq=[("read", "a", 0, 8 * KIB, 0)] * 9
    + [("read", "a", 0, 64 * KIB, 1), ("read", "a", 0, 256 * KIB, 0), ("age", "a", 0, 8 * KIB, 0)]
    + [("read", "b", 0, 64 * KIB, 1), ("read", "b", 0, 256 * KIB, 0), ("fork", "a", 0, 8 * KIB, 0)]
)
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


@settings(max_examples=60, deadline=None)
@given(seq=rounds, always=st.booleans(), max_entries=st.sampled_from([4096, 3]))
def test_tables_rebuilt_only_where_inputs_changed_decide_as_full_rebuilds(
    seq, always, max_entries
) -> None:
    # SCU ages every other round: aging changes the tables of VMs that read nothing; a
    # table cut to a few entries keeps the most used, an order aging can change
    options = replace(
        scu_options_for(TOPO_OPTERON_16, Unify.LLC), update_period=2, max_entries=max_entries
    )
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


def _aging_run(chunks, max_entries: int, vm_unit_out=None):
    """Two rounds of one VM that reads nothing, the second aging (``update_period`` 2),
    over a table seeded with ``chunks`` (chunk id -> (units, use)); returns the second
    round's decision and state, and the same from a round that rebuilds every table."""
    options = replace(
        scu_options_for(TOPO_OPTERON_16, Unify.LLC),
        update_period=2,
        max_entries=max_entries,
        cost=None,
        watch=False,
    )
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC, scu_options=options)
    # one vCPU: units without the VM's vCPUs exist
    vms = (Vm("vm0", (Vcpu(VcpuId("vm0", 0), None, frozenset(range(16))),), 2 << 30),)
    table = MfcTable(options.params, [UnitView(u.id, u.capacity_bytes) for u in policy.units])
    for n, (units, use) in chunks.items():
        table.restore_chunk(
            ChunkKey("vm0", ChunkId(n, 0)), ChunkState(256 * KIB, set(units), use_pairs(dict(use)))
        )
    state = RoundState(scu=ScuState(table=table))
    results = []
    for tick in (1, 2):
        samples = (sample("vm0", 0, 10**6, busy=0.01),)
        obs = Observation(tick, vms, samples, (GuestReport("vm0", tick, 1.0, ()),))
        full = replace(state, scu=replace(state.scu, built_on={}))
        results.append((policy.decide(obs, state), policy.decide(obs, full)))
        state = results[-1][0][1]
    return results


def test_an_aging_that_reorders_a_cut_table_rebuilds_it() -> None:
    # totals 6 and 5; halved per unit, rounding down: 1 + 1 = 2 and 2, a tie the lower
    # chunk id wins: the table cut to one entry changes with no read at all
    (first, _), ((decision, state), (expected, expected_state)) = _aging_run(
        {1: ((), {0: 3, 1: 3}), 0: ((), {0: 5})}, max_entries=1
    )
    assert [e.chunk.file_id for e in first[1].scu.published["vm0"]] == [1]
    assert [e.chunk.file_id for e in state.scu.published["vm0"]] == [0]
    assert decision == expected
    assert state.scu.published == expected_state.scu.published


def test_an_aging_that_empties_a_cached_chunks_use_rebuilds_its_vms_table() -> None:
    # a chunk cached in a unit where the VM has no vCPU is read non-caching while used;
    # the aging that empties its use (not forgetting it: it is cached) drops its entry
    ((first, _), _) = _aging_run({}, max_entries=4096)
    pinned = set(first[1].obs.unit_of.values())
    far = next(u.id for u in TOPO_OPTERON_16.units() if u.id not in pinned)
    (first, _), ((decision, state), (expected, expected_state)) = _aging_run(
        {7: ((far,), {far: 1})}, max_entries=4096
    )
    assert [e.chunk.file_id for e in first[1].scu.published["vm0"]] == [7]
    assert state.scu.published["vm0"] == ()
    assert decision == expected
    assert state.scu.published == expected_state.scu.published


def _eager_aging(table: MfcTable, max_chunks: int) -> tuple[MfcTable, dict[str, int]]:
    """The simple form of ``update_use``: one pass halving every chunk's counts, dropping
    the uncached ones left unused, in a table whose counts are all current."""
    aged = MfcTable(table.params, table.units.values(), table.tenants)
    for key, state in table.chunks.items():
        use = {u: n // 2 for u, n in state.use.items() if n // 2 > 0}
        if state.units or use:
            halved = ChunkState(
                state.size, set(state.units), use_pairs(use), {}, state.migrations // 2
            )
            aged.restore_chunk(key, halved)
    return aged, aged._forget_excess(max_chunks)


@settings(max_examples=150, deadline=None)
@given(seq=ops, max_chunks=st.sampled_from([4, 12, 100]))
def test_lazy_aging_decides_as_halving_every_chunk_at_once(seq, max_chunks) -> None:
    # the product's table halves a chunk's counts when it next reads it, and forgets
    # chunks through per-aging lists; the simple form ages every chunk at each aging
    lazy, eager = _table(), _table()
    for op, vm, n, size, unit in seq:
        if op == "age":
            forgotten = lazy.update_use(max_chunks)
            eager, expected = _eager_aging(eager, max_chunks)
            assert forgotten == expected
        elif op == "fork":
            lazy = lazy.copy()
        elif op == "read":
            key = ChunkKey(vm, ChunkId(n, 0))
            allowed = frozenset({unit, (unit + 1) % 4})
            assert lazy.mfc_access(key, size, unit, allowed) == eager.mfc_access(
                key, size, unit, allowed
            )
        assert _snapshot(lazy) == _snapshot(eager)
        assert len(lazy.chunks) == len(eager.chunks)
        for u in range(4):
            assert lazy.assigned_bytes(u) == eager.assigned_bytes(u)
            assert lazy.chunks_on(u) == eager.chunks_on(u)


def _simple_co_runners(unit_of, group_of_unit):
    """Every VM's co-runners as the round first found them: a union per vCPU (main at
    f7171a5)."""
    by_group: dict[int, set[VcpuId]] = {}
    for vcpu, unit in unit_of.items():
        by_group.setdefault(group_of_unit.get(unit, -1), set()).add(vcpu)
    out: dict[str, set[VcpuId]] = {}
    for vcpu, unit in unit_of.items():
        out.setdefault(vcpu.vm, set()).update(by_group[group_of_unit.get(unit, -1)])
    return {vm: frozenset(v) for vm, v in out.items()}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5)), max_size=40),
    st.lists(st.integers(-1, 2), min_size=4, max_size=4),
)
def test_co_runners_shared_per_combination_of_groups_are_every_vcpus_union(pins, groups) -> None:
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC)
    # random LLC groups of the units (several units to a group, or none: -1)
    policy._group_of_unit = {u: g for u, g in enumerate(groups) if g >= 0}
    unit_of = {VcpuId(f"vm{vm}", i): unit for i, (vm, unit) in enumerate(pins)}
    assert policy._co_runners(unit_of) == _simple_co_runners(unit_of, policy._group_of_unit)
