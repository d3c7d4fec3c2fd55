"""SCU for VMs: placement tables from guest reports, over OBS's pinning."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from unicache.model import (
    ChunkAccess,
    ChunkId,
    GuestReport,
    Observation,
    PublishPlacement,
    Refusal,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.policy.scu.options import scu_options_for
from unicache.policy.scu.policy import SCU_BOUNDED, SCU_SHARE, ScuPolicy, ScuState
from unicache.topology import Unify

from tests.policy.conftest import sample
from tests.topologies import TOPO_OPTERON_16

CHUNK = 256 * 1024


def _vms(count: int = 2, vcpus: int = 4) -> tuple[Vm, ...]:
    return tuple(
        Vm(f"vm{v}", tuple(Vcpu(VcpuId(f"vm{v}", i), None, frozenset(range(16)))
                           for i in range(vcpus)))
        for v in range(count)
    )


def _report(vm: str, files: range, vcpu: int = 0, reads: int = 1) -> GuestReport:
    return GuestReport(
        vm,
        0,
        1.0,
        tuple(
            ChunkAccess(ChunkId(f, 0), CHUNK * reads, reads, 0, ((vcpu, CHUNK * reads),))
            for f in files
        ),
    )


def _round(policy, tick, vms, reports, state):
    # each vCPU busy 0.1 % of the second: about what reading the reports' ten-odd MiB
    # takes, so that reads, not other work, fill the VM's time (cost.predict_gain)
    samples = [sample(v.id.vm, v.id.index, 10**6, busy=0.001) for vm in vms for v in vm.vcpus]
    return policy.decide(Observation(tick, vms, tuple(samples), tuple(reports)), state)


def test_placement_entries_name_only_the_vms_own_vcpus_in_the_chunks_unit() -> None:
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC)
    vms = _vms()
    state = RoundState()
    checked = 0
    for tick in range(4):
        reports = [_report("vm0", range(40), vcpu=tick % 4), _report("vm1", range(40), vcpu=1)]
        decision, state = _round(policy, tick, vms, reports, state)
        checked += _check_tables(decision, state.obs.unit_of)
    assert checked > 0


def _check_tables(decision, unit_of) -> int:
    tables = [a for a in decision.actions if isinstance(a, PublishPlacement)]
    for action in tables:
        for entry in action.table.entries:
            for index in entry.vcpus:
                vcpu = VcpuId(action.vm, index)
                assert vcpu in unit_of
                if entry.caching:
                    assert unit_of[vcpu] == entry.unit
        assert "fig2:" in action.reason
    return len(tables)


def test_files_larger_than_one_unit_are_spread_over_units() -> None:
    # 40 chunks of 256 KiB = 10 MiB: more than one Opteron chip's 4.25 MiB
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC)
    vms = _vms(count=1)
    state = RoundState()
    for tick in range(6):
        decision, state = _round(policy, tick, vms, [_report("vm0", range(40), vcpu=0)], state)
    table = state.scu.table
    assert table is not None
    used = {u for units in table.holders().values() for u in units}
    assert len(used) >= 3


def test_a_vm_with_one_reader_gets_no_copies_wherever_it_read() -> None:
    # MFC §4.4: copies relieve a core many readers migrate to; one reader needs none. Its
    # reads come from every unit in turn (a thread the guest moves before it is placed),
    # which made every unit a "frequent user" and gave chunks up to four copies: twice the
    # cache the data needs (opteron-16, 8 MiB, one thread: 3 % of bytes from DRAM)
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC)
    vms = _vms(count=1, vcpus=16)
    state = RoundState()
    for tick in range(12):
        reports = [_report("vm0", range(32), vcpu=(tick * 5) % 16, reads=4)]
        _, state = _round(policy, tick, vms, reports, state)
    table = state.scu.table
    assert table is not None and table.holders()
    assert {len(units) for units in table.holders().values()} == {1}


def test_steady_workload_stops_republishing_tables() -> None:
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC)
    vms = _vms()
    state = RoundState()
    published = []
    for tick in range(30):
        reports = [_report("vm0", range(12), vcpu=0), _report("vm1", range(12, 20), vcpu=2)]
        decision, state = _round(policy, tick, vms, reports, state)
        published.append(sum(isinstance(a, PublishPlacement) for a in decision.actions))
    assert sum(published[15:]) == 0, published


def test_table_is_bounded_by_max_entries() -> None:
    options = scu_options_for(TOPO_OPTERON_16, Unify.LLC, max_entries=5)
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC, scu_options=options)
    # the first round measures the VM's reads unplaced (the watch); the second places it
    _, state = _round(policy, 0, _vms(1), [_report("vm0", range(50))], RoundState())
    decision, _ = _round(policy, 1, _vms(1), [_report("vm0", range(50))], state)
    tables = [a for a in decision.actions if isinstance(a, PublishPlacement)]
    assert tables and len(tables[0].table.entries) <= 5


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), st.integers(0, 3)),
                max_size=40))
def test_same_round_inputs_give_same_decisions(reads: list[tuple[int, int, int]]) -> None:
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC)
    vms = _vms()
    reports = [_report(f"vm{v}", range(f, f + 1), vcpu=c) for v, f, c in reads]
    assert _round(policy, 0, vms, reports, RoundState()) == _round(
        policy, 0, vms, reports, RoundState()
    )


def test_a_vm_reporting_more_accesses_than_its_budget_costs_no_more_and_is_told() -> None:
    options = replace(scu_options_for(TOPO_OPTERON_16, Unify.LLC, max_accesses_per_vm=64),
                      cost=None, watch=False)
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC, scu_options=options)
    vms = _vms(count=2)
    flood = _report("vm0", range(1000))  # one vCPU per chunk: 1,000 accesses
    decision, _ = _round(policy, 0, vms, [flood, _report("vm1", range(2000, 2010))],
                         RoundState())
    assert sum(1 for d in decision.chunk_decisions if d.vm == "vm0") == 64
    assert sum(1 for d in decision.chunk_decisions if d.vm == "vm1") == 10  # its own budget
    (bounded,) = [r for r in decision.refusals if r.kind == SCU_BOUNDED]
    assert "936 chunk accesses of vm0" in bounded.reason


# --- one VM's reports never change another VM's table (issue #12) -----------------------

HONEST_FILES = range(20)  # 20 chunks of 256 KiB: within its half of the four chips' LLCs


def _hostile_flood(tick: int) -> list[GuestReport]:
    """Forged reads: 200 new chunks a round (three times the four chips' LLCs), each read
    2**40 times from every vCPU."""
    reads = 1 << 40
    chunks = tuple(
        ChunkAccess(ChunkId(10_000 + 1_000 * tick + f, 0), CHUNK * reads, reads, 0,
                    tuple((i, CHUNK * reads // 4) for i in range(4)))
        for f in range(200)
    )
    return [GuestReport("vm0", tick, 1.0, chunks)]


def _with_hostile(hostile: Callable[[int], list[GuestReport]]) -> tuple[list, list[Refusal]]:
    """Two VMs with one vCPU pinned on each opteron-16 chip; vm1 reads HONEST_FILES twice a
    round from a vCPU that changes every round, vm0 sends ``hostile(tick)``: vm1's tables,
    and the refusals."""
    options = replace(scu_options_for(TOPO_OPTERON_16, Unify.LLC, max_chunks=512),
                      cost=None, watch=False)
    policy = ScuPolicy(TOPO_OPTERON_16.units(), options, TOPO_OPTERON_16.levels)
    vms = _vms(count=2)
    pins = {v.id: v.id.index for vm in vms for v in vm.vcpus}
    samples = tuple(sample(v.id.vm, v.id.index, 10**6, busy=0.5) for vm in vms for v in vm.vcpus)
    state = ScuState()
    tables: list = []
    refusals: list[Refusal] = []
    for tick in range(8):
        reports = (*hostile(tick), _report("vm1", HONEST_FILES, vcpu=tick % 4, reads=2))
        decision, state = policy.decide(Observation(tick, vms, samples, reports), state, pins)
        tables += [(tick, a.table) for a in decision.actions
                   if isinstance(a, PublishPlacement) and a.vm == "vm1"]
        refusals += decision.refusals
    return tables, refusals


def test_a_hostile_vms_reports_never_change_another_vms_published_table() -> None:
    # issue #12: one table for all VMs let a VM reporting forged reads evict every chunk of
    # another, whose table then sent all its reads to non-caching loads
    quiet, _ = _with_hostile(lambda tick: [])
    assert quiet and all(e.caching and e.unit >= 0 for _, t in quiet for e in t.entries)
    modest, _ = _with_hostile(lambda tick: [_report("vm0", range(100, 104), vcpu=tick % 4)])
    assert modest == quiet
    flooded, refusals = _with_hostile(_hostile_flood)
    assert flooded == quiet
    # what the shares and the table's bound kept from the flood is counted, against vm0 only
    counted = {r.kind for r in refusals if "vm0" in r.reason}
    assert {SCU_SHARE, SCU_BOUNDED} <= counted
    assert not [r for r in refusals if "vm1" in r.reason]
