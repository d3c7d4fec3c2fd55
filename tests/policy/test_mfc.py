"""Figure 2 of the MFC paper, branch by branch, plus eq. 1-2 and §4.5."""

from __future__ import annotations

import pytest
from unicache.model import ChunkId
from unicache.policy.scu import mfc
from unicache.policy.scu.mfc import MfcTable
from unicache.policy.scu.mfc_state import ChunkKey, MfcParams, UnitView, m_use
from unicache.policy.scu.options import min_read_size, scu_options_for
from unicache.topology import Unify

from tests.topologies import TOPO_OPTERON_16

KIB = 1024
CHUNK = 256 * KIB
ALL = frozenset({0, 1, 2})


def key(n: int, vm: str = "vm") -> ChunkKey:
    return ChunkKey(vm, ChunkId(n, 0))


def table(
    capacity: int = 2 * CHUNK + 1, loads: tuple[float, ...] = (0, 0, 0), **kw: int
) -> MfcTable:
    params = MfcParams(
        min_read_size=kw.pop("min_read_size", 32 * KIB),
        migration_cycles=kw.pop("migration_cycles", 1000),
        offchip_bytes_per_cycle=1.0,
        max_copies=kw.pop("max_copies", 3),
    )
    return MfcTable(params, [UnitView(i, capacity, 0, load) for i, load in enumerate(loads)])


def test_small_chunk_is_read_where_the_thread_is() -> None:
    t = table()
    access = t.mfc_access(key(1), 4 * KIB, curunit=2, allowed=ALL)
    assert (access.unit, access.caching, access.rule) == (2, True, mfc.RULE_SMALL)
    assert t.assigned_bytes(2) == 0


def test_first_read_caches_on_the_current_unit_when_it_has_the_most_spare_capacity() -> None:
    t = table()
    access = t.mfc_access(key(1), CHUNK, curunit=1, allowed=ALL)
    # a first read is no frequent use (§4.2): lines 12-16, ties to the current unit
    assert (access.unit, access.rule) == (1, mfc.RULE_MIGRATE_MAX_AVAIL)
    assert t.holders()[key(1)] == {1}


def test_first_read_goes_to_the_unit_with_the_most_spare_capacity() -> None:
    t = table()
    t.mfc_access(key(10), CHUNK, curunit=0, allowed=ALL)  # unit 0 half full
    access = t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    assert (access.unit, access.rule) == (1, mfc.RULE_MIGRATE_MAX_AVAIL)


def test_frequent_user_with_spare_capacity_replicates_there() -> None:
    t = table()
    t.mfc_access(key(1), CHUNK, curunit=0, allowed=frozenset({0}))  # cached on unit 0
    first = t.mfc_access(key(1), CHUNK, curunit=1, allowed=ALL)
    second = t.mfc_access(key(1), CHUNK, curunit=1, allowed=ALL)
    # unit 1 now reads it as often as unit 0's copy is used: a frequent user
    assert first.rule == mfc.RULE_MIGRATE_HOLDER
    assert (second.unit, second.rule) == (1, mfc.RULE_REPLICATE_SPARE)
    assert t.holders()[key(1)] == {0, 1}


def test_a_vm_whose_readers_need_no_copy_gets_none() -> None:
    # the same frequent use as above, but the VM's readers fit one unit's cores (its
    # limit: one copy): the reader migrates to the holder instead of replicating
    t = table()
    t.mfc_access(key(1), CHUNK, curunit=0, allowed=frozenset({0}), max_copies=1)
    for _ in range(2):
        access = t.mfc_access(key(1), CHUNK, curunit=1, allowed=ALL, max_copies=1)
        assert (access.unit, access.rule) == (0, mfc.RULE_MIGRATE_HOLDER)
    assert t.holders()[key(1)] == {0}


def test_thread_passing_through_a_unit_does_not_replicate() -> None:
    # §4.4's single thread: it reads f from unit 1 now and then, but f's copy on unit 0
    # serves far more reads, so unit 1 is no frequent user and spends no space on a replica
    t = table()
    for _ in range(6):
        t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    for _ in range(3):
        access = t.mfc_access(key(1), CHUNK, curunit=1, allowed=ALL)
        assert (access.unit, access.rule) == (0, mfc.RULE_MIGRATE_HOLDER)
    assert t.holders()[key(1)] == {0}


def test_full_current_unit_migrates_to_unit_with_most_spare_capacity() -> None:
    t = table()
    for n in (10, 11):
        t.mfc_access(key(n), CHUNK, curunit=0, allowed=frozenset({0}))  # fills unit 0
    t.mfc_access(key(12), CHUNK, curunit=1, allowed=frozenset({1}))  # unit 1 half full
    access = t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    assert (access.unit, access.rule) == (2, mfc.RULE_MIGRATE_MAX_AVAIL)


def _fill(t: MfcTable, uses: int) -> None:
    # two chunks on every unit, each used ``uses`` times there
    n = 100
    for unit in sorted(t.units):
        for _ in range(2):
            for _ in range(uses):
                t.mfc_access(key(n), CHUNK, curunit=unit, allowed=frozenset({unit}))
            n += 1


def test_uncached_chunk_more_popular_than_lfu_evicts_it() -> None:
    t = table()
    _fill(t, uses=1)
    first = t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)  # use 0 -> 1
    second = t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)  # 1 is not < 1: use -> 2
    assert first.rule == second.rule == mfc.RULE_NON_CACHING
    access = t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)  # LFU use 1 < 2
    assert access.rule == mfc.RULE_EVICT_LFU
    assert access.caching
    assert access.evicted == (key(100),)
    assert key(100) not in t.holders()


def test_unpopular_uncached_chunk_uses_non_caching_loads_in_place() -> None:
    t = table()
    _fill(t, uses=3)
    access = t.mfc_access(key(1), CHUNK, curunit=2, allowed=ALL)
    assert (access.unit, access.caching, access.rule) == (2, False, mfc.RULE_NON_CACHING)
    assert key(1) not in t.holders()


def test_reader_in_a_holding_unit_stays_there() -> None:
    t = table()
    t.mfc_access(key(1), CHUNK, curunit=1, allowed=ALL)
    access = t.mfc_access(key(1), CHUNK, curunit=1, allowed=ALL)
    assert (access.unit, access.rule) == (1, mfc.RULE_STAY_HOLDER)


def test_reader_elsewhere_migrates_to_the_holder() -> None:
    t = table()
    _fill(t, uses=1)
    for _ in range(3):  # the third read evicts the LFU chunk of unit 0
        t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    access = t.mfc_access(key(1), CHUNK, curunit=2, allowed=ALL)
    assert (access.unit, access.rule) == (0, mfc.RULE_MIGRATE_HOLDER)


def test_busy_holder_and_idle_reader_replicate_a_much_more_popular_chunk() -> None:
    t = table(loads=(3.0, 0.0, 0.0), max_copies=3)
    _fill(t, uses=1)
    for _ in range(2):
        t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    for _ in range(4):  # f.use[holder] grows past 2 x LFU use on unit 2
        t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    access = t.mfc_access(key(1), CHUNK, curunit=2, allowed=ALL)
    assert (access.unit, access.rule) == (2, mfc.RULE_REPLICATE_BUSY)
    assert t.holders()[key(1)] == {0, 2}


def test_busy_holder_but_reader_not_idle_migrates() -> None:
    t = table(loads=(3.0, 0.0, 1.0))
    _fill(t, uses=1)
    for _ in range(6):
        t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    access = t.mfc_access(key(1), CHUNK, curunit=2, allowed=ALL)
    assert access.rule == mfc.RULE_MIGRATE_HOLDER


def test_competitive_rule_stops_migrating_once_migrations_cost_more_than_a_load() -> None:
    # load cost = CHUNK cycles; each migration costs CHUNK/2: two are allowed, not three
    t = table(migration_cycles=CHUNK // 2)
    _fill(t, uses=1)
    for _ in range(3):
        t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    rules = [t.mfc_access(key(1), CHUNK, curunit=2, allowed=ALL).rule for _ in range(3)]
    assert rules == [mfc.RULE_MIGRATE_HOLDER, mfc.RULE_MIGRATE_HOLDER, mfc.RULE_COMPETITIVE]


def test_update_use_halves_use_counts_and_forgets_cold_uncached_chunks() -> None:
    t = table()
    for _ in range(4):
        t.mfc_access(key(1), CHUNK, curunit=0, allowed=ALL)
    t.mfc_access(key(2), 4 * KIB, curunit=0, allowed=ALL)  # small: tracked, never used
    before = t.chunks[key(1)].use[0]
    t.update_use(max_chunks=100)
    assert t.chunks[key(1)].use[0] == before // 2
    assert key(2) not in t.chunks


def test_reads_only_go_to_units_where_the_vm_has_vcpus() -> None:
    t = table()
    _fill(t, uses=1)
    for _ in range(3):
        access = t.mfc_access(key(1, vm="other"), CHUNK, curunit=1, allowed=frozenset({1}))
        assert access.unit == 1


@pytest.mark.parametrize(
    ("misses", "expected"),
    [(0, 0), (8191, 0), (8192, 512 * KIB), (10**9, 512 * KIB)],
    ids=["idle", "just-below-m_lines", "m_lines", "thrashing"],
)
def test_eq1_unit_uses_whole_level_once_misses_reach_its_line_count(
    misses: int, expected: int
) -> None:
    assert m_use(misses, level_lines=8192, level_size=512 * KIB) == expected


def test_eq2_cache_avail_subtracts_the_larger_of_counter_use_and_assigned_bytes() -> None:
    params = MfcParams(min_read_size=1)
    t = MfcTable(params, [UnitView(0, 4 * CHUNK, counter_use=3 * CHUNK)])
    assert t.cache_avail(0) == CHUNK
    t.mfc_access(key(1), CHUNK, curunit=0, allowed=frozenset({0}))
    assert t.cache_avail(0) == CHUNK  # max(3 chunks counted, 1 chunk assigned)


def test_min_read_size_for_opteron_is_tens_of_kilobytes_as_in_the_paper() -> None:
    # §6.1: "For files smaller than 45 Kbytes, MFC will stop migrating threads"
    topo = TOPO_OPTERON_16
    paper = min_read_size(topo.migration_cycles or 0, 2.9, 0.9)  # §4.5 without a margin
    assert 16 * KIB < paper < 64 * KIB
    options = scu_options_for(topo, Unify.LLC)
    # the product asks a migration to save twice its (cross-chip) cost: a few times more
    assert paper < options.params.min_read_size < 4 * paper
    assert options.chunk_size == 256 * KIB  # §4.7: half of the 512 KiB L2, one chunk pays


def test_min_read_size_is_infinite_when_on_chip_is_not_faster() -> None:
    assert min_read_size(10_000, 1.0, 1.0) >= 2**62


# --- per-VM shares (MFC §4.6, the other VMs as the cache's "other uses"; issue #12) ------


def test_a_vm_within_its_share_keeps_its_chunks_however_much_another_vm_reads() -> None:
    t = table(capacity=4 * CHUNK + 1)
    t.set_units(t.units.values(), {0: frozenset({"a", "b"})})  # two tenants: 2 chunks each
    assert t.share(0, "a") == t.share(0, "b") == (4 * CHUNK + 1) // 2
    assert t.share(0, "other") == 0 and t.share(1, "other") == 4 * CHUNK + 1  # no tenants
    only0 = frozenset({0})
    t.mfc_access(key(1, vm="b"), CHUNK, curunit=0, allowed=only0)
    for n in (2, 3, 4, 5):
        for _ in range(10):
            access = t.mfc_access(key(n, vm="a"), CHUNK, curunit=0, allowed=only0)
    assert t.holders()[key(1, vm="b")] == {0}
    # vm a is at its share: Figure 2 over both VMs would have evicted b's less used chunk
    assert (access.caching, access.capped) == (False, True)
    assert t.vm_bytes(0, "a") <= t.share(0, "a")


def test_a_new_tenant_takes_its_share_from_the_vm_over_its_share() -> None:
    t = table(capacity=4 * CHUNK + 1)
    only0 = frozenset({0})
    for n in (1, 2, 3, 4):  # alone, vm a fills unit 0
        t.mfc_access(key(n, vm="a"), CHUNK, curunit=0, allowed=only0)
    assert t.assigned_bytes(0) == 4 * CHUNK
    t.set_units(t.units.values(), {0: frozenset({"a", "b"})})  # vm b is pinned there too
    access = t.mfc_access(key(9, vm="b"), CHUNK, curunit=0, allowed=only0)
    assert (access.unit, access.caching) == (0, True)
    assert [k.vm for k in access.evicted] == ["a"]
    assert t.assigned_bytes(0) <= 4 * CHUNK + 1
