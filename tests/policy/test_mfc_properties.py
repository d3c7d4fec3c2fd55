"""Property tests of the MFC table's invariants under arbitrary read sequences."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from unicache.model import ChunkId
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import RULE_EVICT_LFU, ChunkKey, MfcParams, UnitView

KIB = 1024

reads = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),  # vm
        st.integers(0, 30),  # chunk
        st.sampled_from([8 * KIB, 64 * KIB, 128 * KIB, 256 * KIB]),  # size
        st.integers(0, 3),  # unit of the reading vCPU
        st.integers(0, 20),  # update_use every so often
    ),
    max_size=300,
)
setups = st.tuples(
    st.integers(1, 4),  # max copies
    st.lists(st.floats(0, 3), min_size=4, max_size=4),  # run-queue lengths
    st.sampled_from([256 * KIB, 512 * KIB, 1024 * KIB]),  # capacity
)


def _table(setup: tuple[int, list[float], int]) -> MfcTable:
    copies, loads, capacity = setup
    params = MfcParams(min_read_size=32 * KIB, max_copies=copies, migration_cycles=5000)
    return MfcTable(params, [UnitView(i, capacity, 0, load) for i, load in enumerate(loads)])


def _run(setup: tuple[int, list[float], int], seq: list[tuple[str, int, int, int, int]]) -> list:
    t = _table(setup)
    out = []
    for vm, n, size, unit, tick in seq:
        allowed = frozenset({0, 1, 2, 3}) if vm == "a" else frozenset({unit, (unit + 1) % 4})
        out.append(t.mfc_access(ChunkKey(vm, ChunkId(n, 0)), size, unit, allowed))
        if tick == 0:
            t.update_use(max_chunks=16)
    return out


@settings(max_examples=150, deadline=None)
@given(setup=setups, seq=reads)
def test_no_unit_is_ever_overcommitted_and_no_chunk_exceeds_max_copies(setup, seq) -> None:
    t = _table(setup)
    for vm, n, size, unit, tick in seq:
        t.mfc_access(ChunkKey(vm, ChunkId(n, 0)), size, unit, frozenset({0, 1, 2, 3}))
        if tick == 0:
            t.update_use(max_chunks=16)
        for u, view in t.units.items():
            assigned = sum(st_.size for st_ in t.chunks.values() if u in st_.units)
            assert assigned == t.assigned_bytes(u)
            assert t.chunks_on(u) == sorted(k for k, st_ in t.chunks.items() if u in st_.units)
            assert assigned <= view.capacity
        assert all(len(st_.units) <= setup[0] for st_ in t.chunks.values())


@settings(max_examples=100, deadline=None)
@given(setup=setups, seq=reads)
def test_same_reads_give_same_decisions(setup, seq) -> None:
    assert _run(setup, seq) == _run(setup, seq)


@settings(max_examples=150, deadline=None)
@given(setup=setups, seq=reads)
def test_lfu_eviction_always_takes_the_least_used_copy(setup, seq) -> None:
    t = _table(setup)
    everywhere = frozenset({0, 1, 2, 3})
    for vm, n, size, unit, _ in seq:
        k = ChunkKey(vm, ChunkId(n, 0))
        before = {key: (set(s.units), dict(s.use)) for key, s in t.chunks.items()}
        access = t.mfc_access(k, size, unit, everywhere)
        if access.rule == RULE_EVICT_LFU:
            victim = access.evicted[0]
            lowest = min(
                use.get(u, 0) for key, (units, use) in before.items() if key != k for u in units
            )
            assert before[victim][1].get(access.unit, 0) == lowest


@settings(max_examples=100, deadline=None)
@given(setup=setups, seq=reads)
def test_table_stays_bounded_after_aging(setup, seq) -> None:
    t = _table(setup)
    for vm, n, size, unit, _ in seq:
        t.mfc_access(ChunkKey(vm, ChunkId(n, 0)), size, unit, frozenset({0, 1, 2, 3}))
    t.update_use(max_chunks=16)
    cached = sum(1 for s in t.chunks.values() if s.units)
    assert len(t.chunks) <= max(16, cached)


# --- per-VM shares of a unit (MFC §4.6 per VM, issue #12) -------------------------------

EVERY_UNIT = frozenset({0, 1, 2, 3})
TENANCIES = [frozenset(), frozenset({"a"}), frozenset({"b"}), frozenset({"a", "b"})]


@settings(max_examples=100, deadline=None)
@given(setup=setups, seq=reads)
def test_with_shares_one_vms_reads_never_change_anothers_decisions(setup, seq) -> None:
    def decisions_of_b(with_a: bool) -> list:
        t = _table(setup)
        t.set_units(t.units.values(), dict.fromkeys(range(4), frozenset({"a", "b"})))
        out = []
        for vm, n, size, unit, tick in seq:
            if vm == "b" or with_a:
                access = t.mfc_access(ChunkKey(vm, ChunkId(n, 0)), size, unit, EVERY_UNIT)
                if vm == "b":
                    out.append((access.unit, access.caching, access.rule, access.evicted))
            if tick == 0:
                t.update_use(max_chunks=10_000)
        return out

    assert decisions_of_b(with_a=True) == decisions_of_b(with_a=False)


@settings(max_examples=100, deadline=None)
@given(
    setup=setups,
    seq=reads,
    plans=st.lists(st.lists(st.sampled_from(TENANCIES), min_size=4, max_size=4), min_size=1),
)
def test_with_changing_shares_no_unit_is_overcommitted(setup, seq, plans) -> None:
    t = _table(setup)
    for i, (vm, n, size, unit, tick) in enumerate(seq):
        if tick == 1:  # the VMs move: new shares, old chunks left over some of them
            t.set_units(t.units.values(), dict(enumerate(plans[i % len(plans)])))
        t.mfc_access(ChunkKey(vm, ChunkId(n, 0)), size, unit, EVERY_UNIT)
        if tick == 0:
            t.update_use(max_chunks=16)
        for u, view in t.units.items():
            assert t.assigned_bytes(u) <= view.capacity
            for name in ("a", "b"):
                held = sum(s.size for k, s in t.chunks.items() if k.vm == name and u in s.units)
                assert t.vm_bytes(u, name) == held
