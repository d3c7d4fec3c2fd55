"""SCU's cost model: migrate only where the saving beats the migration with a margin,
extents where one chunk saves too little, and a VM left alone where unification gains
nothing."""

from __future__ import annotations

from unicache.model import (
    BUDGET_UNLIMITED,
    ChunkAccess,
    ChunkId,
    GuestReport,
    Observation,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.scu.cost import (
    EXTENT_PAYBACK,
    MIGRATION_MARGIN,
    CostModel,
    needed_gain,
    running_fraction,
)
from unicache.policy.scu.options import scu_options_for
from unicache.policy.scu.policy import DOUBT_ROUNDS, STEP_ASIDE, TRUST_ROUNDS, ScuPolicy, ScuState
from unicache.topology import Unify

from tests.topologies import TOPO_OPTERON_16

KIB = 1024
MIB = 1024 * KIB
OPTERON = CostModel(
    onchip_bytes_per_cycle=2.9, offchip_bytes_per_cycle=0.9, migration_cycles=23_400
)
#: a machine whose L3 reads 256 KiB far faster than a migration (today's hosts)
FAST_L3 = CostModel(
    onchip_bytes_per_cycle=32.0, offchip_bytes_per_cycle=8.0, migration_cycles=48_000
)


def test_a_migration_pays_only_with_the_margin() -> None:
    size = OPTERON.min_read_size()
    assert OPTERON.migration_pays(size)
    assert not OPTERON.migration_pays(size - 2)
    assert OPTERON.saving(size) >= MIGRATION_MARGIN * OPTERON.migration_cost()


def test_one_chunk_pays_on_the_opteron_but_fast_l3_machines_need_an_extent() -> None:
    assert OPTERON.extent_chunks(256 * KIB) == 1
    k = FAST_L3.extent_chunks(256 * KIB)
    needed = EXTENT_PAYBACK * MIGRATION_MARGIN * FAST_L3.migration_cost()
    assert FAST_L3.saving(k * 256 * KIB) >= needed > FAST_L3.saving((k - 1) * 256 * KIB)


def test_a_scan_of_extents_the_aggregate_holds_is_predicted_to_gain() -> None:
    # docs/simulator.md's Rome scan: 64 MiB read extent by extent, one unit holds 16 MiB,
    # eight hold it all; extents that saved just the margin were predicted to lose
    extent = FAST_L3.extent_chunks(256 * KIB) * 256 * KIB
    estimate = FAST_L3.predict_gain([(extent, 4)] * (64 * MIB // extent), 16 * MIB, 128 * MIB, 8)
    assert estimate.pays and estimate.fraction > 0.2
    smallest = next(k for k in range(1, 17) if FAST_L3.migration_pays(k * 256 * KIB))
    at_margin = [(smallest * 256 * KIB, 4)] * (64 * MIB // (smallest * 256 * KIB))
    assert not FAST_L3.predict_gain(at_margin, 16 * MIB, 128 * MIB, 8).pays


def test_no_gain_when_the_hot_data_fits_what_one_thread_reaches() -> None:
    chunks = [(256 * KIB, 10)] * 4  # 1 MiB
    estimate = OPTERON.predict_gain(chunks, 2 * MIB, 8 * MIB, 4)
    assert not estimate.pays
    assert "fits one unit" in estimate.reason


def test_no_gain_when_the_vcpus_sit_in_one_unit() -> None:
    estimate = OPTERON.predict_gain([(256 * KIB, 10)] * 32, 2 * MIB, 2 * MIB, 1)
    assert not estimate.pays


def test_gain_when_the_aggregate_holds_what_one_unit_cannot() -> None:
    estimate = OPTERON.predict_gain([(256 * KIB, 10)] * 32, 2 * MIB, 16 * MIB, 4)
    assert estimate.pays and estimate.fraction > 0.3


def test_migrations_that_cost_more_than_they_save_predict_a_loss() -> None:
    # small reads: each read's saving is far below a migration
    estimate = FAST_L3.predict_gain([(4 * KIB, 10)] * 4096, 2 * MIB, 16 * MIB, 4)
    assert estimate.fraction < 0 and not estimate.pays


def test_readers_that_fit_one_units_cores_always_run() -> None:
    assert running_fraction(1, 4, 4) == 1.0
    assert running_fraction(4, 4, 4) == 1.0
    assert running_fraction(16, 1, 4) == 1.0


def test_more_readers_than_a_units_cores_wait_for_the_unit_of_their_data() -> None:
    # 16 readers over 4 units of 4 cores: E[min(Binomial(16, 1/4), 4)] * 4 / 16
    assert 0.82 < running_fraction(16, 4, 4) < 0.84
    assert running_fraction(32, 4, 4) < running_fraction(16, 4, 4)
    assert running_fraction(2, 2, 1) == 0.75


def test_waiting_readers_turn_a_predicted_gain_into_a_loss() -> None:
    chunks = [(256 * KIB, 10)] * 128  # 32 MiB
    alone = OPTERON.predict_gain(chunks, 4 * MIB, 16 * MIB, 4, readers=4, cores_per_unit=4)
    crowded = OPTERON.predict_gain(chunks, 4 * MIB, 16 * MIB, 4, readers=16, cores_per_unit=4)
    assert crowded.fraction < alone.fraction
    assert "readers run 83% of the time" in crowded.reason


def test_a_placed_vm_needs_less_to_stay_placed_than_a_new_one_to_be_placed() -> None:
    assert needed_gain(placed=True) < needed_gain(placed=False)


def _obs(vm: str, chunks: int, size: int) -> Observation:
    accesses = tuple(
        ChunkAccess(ChunkId(1, i), size * 8, 8, 0, ((0, size * 8),)) for i in range(chunks)
    )
    vcpus = tuple(Vcpu(VcpuId(vm, i), None, frozenset({i * 4})) for i in range(4))
    report = GuestReport(vm, 1, 1.0, accesses, guest_vcpus=4)
    return Observation(1, (Vm(vm, vcpus),), (), (report,))


def test_scu_leaves_a_vm_alone_and_logs_why_when_its_data_fits_one_unit() -> None:
    topo = TOPO_OPTERON_16
    scu = ScuPolicy(topo.units(Unify.LLC), scu_options_for(topo, Unify.LLC), topo.levels)
    units = {VcpuId("vm0", i): i for i in range(4)}
    decision, _ = scu.decide(_obs("vm0", 4, 256 * KIB), ScuState(), units)
    assert [r.kind for r in decision.refusals] == [STEP_ASIDE]
    assert "vm0" in decision.refusals[0].reason
    assert not decision.chunk_decisions


def test_scu_places_a_vm_whose_data_needs_several_units_with_unlimited_budgets() -> None:
    topo = TOPO_OPTERON_16
    scu = ScuPolicy(topo.units(Unify.LLC), scu_options_for(topo, Unify.LLC), topo.levels)
    units = {VcpuId("vm0", i): i for i in range(4)}
    decision, state = scu.decide(_obs("vm0", 32, 256 * KIB), ScuState(), units)
    assert not decision.refusals
    entries = state.published["vm0"]
    assert entries and all(e.migration_budget == BUDGET_UNLIMITED for e in entries if e.caching)


def test_a_placed_vm_predicted_to_lose_is_withdrawn_only_after_rounds_of_doubt() -> None:
    topo = TOPO_OPTERON_16
    scu = ScuPolicy(topo.units(Unify.LLC), scu_options_for(topo, Unify.LLC), topo.levels)
    units = {VcpuId("vm0", i): i for i in range(4)}
    # 4 MiB read 4 KiB at a time: more than one unit holds, each read saving far less
    # than a migration costs
    obs = _obs("vm0", 1024, 4 * KIB)
    state = ScuState(round=5)  # placed (not aside) in the rounds before
    for doubt in range(1, DOUBT_ROUNDS):
        decision, state = scu.decide(obs, state, units)
        assert not decision.refusals and state.doubts == {"vm0": doubt}
    decision, state = scu.decide(obs, state, units)
    assert [r.kind for r in decision.refusals] == [STEP_ASIDE]
    assert "to stay placed" in decision.refusals[0].reason
    assert "vm0" in state.aside and not state.doubts


def test_a_vm_a_prediction_left_alone_is_placed_only_after_rounds_of_trust() -> None:
    topo = TOPO_OPTERON_16
    scu = ScuPolicy(topo.units(Unify.LLC), scu_options_for(topo, Unify.LLC), topo.levels)
    units = {VcpuId("vm0", i): i for i in range(4)}
    # one round whose reads fit one unit leaves the VM alone ...
    _, state = scu.decide(_obs("vm0", 4, 256 * KIB), ScuState(), units)
    assert "vm0" in state.aside and state.trusts == {"vm0": 0}
    # ... and a sample that then predicts a gain must do so TRUST_ROUNDS times in a row
    gain = _obs("vm0", 32, 256 * KIB)
    for trust in range(1, TRUST_ROUNDS):
        decision, state = scu.decide(gain, state, units)
        assert [r.kind for r in decision.refusals] == [STEP_ASIDE]
        assert f"gain predicted {trust} of the {TRUST_ROUNDS} rounds" in decision.refusals[0].reason
    decision, state = scu.decide(gain, state, units)
    assert not decision.refusals and "vm0" not in state.aside and not state.trusts
    assert state.published["vm0"]


def test_a_vm_left_alone_that_reads_nothing_stays_left_alone_with_its_table_unbuilt() -> None:
    # MFC decides on reads (§4.2): a round without a VM's reads has nothing to say about
    # it, so a VM SCU withdrew keeps its empty table (not one built from the chunks the
    # table still remembers, emptied again when it next reads) and its standing
    topo = TOPO_OPTERON_16
    scu = ScuPolicy(topo.units(Unify.LLC), scu_options_for(topo, Unify.LLC), topo.levels)
    units = {VcpuId("vm0", i): i for i in range(4)}
    gain, lose = _obs("vm0", 32, 256 * KIB), _obs("vm0", 1024, 4 * KIB)
    _, state = scu.decide(gain, ScuState(round=5), units)  # placed: its chunks tracked
    assert state.published["vm0"]
    for _ in range(DOUBT_ROUNDS):  # then predicted to lose: withdrawn
        _, state = scu.decide(lose, state, units)
    assert "vm0" in state.aside and state.published["vm0"] == ()
    assert state.table is not None and state.table.count_of("vm0") > 0
    silent = Observation(2, lose.vms, (), ())
    for _ in range(3):
        decision, state = scu.decide(silent, state, units)
        assert not decision.actions and state.published["vm0"] == ()
        assert "vm0" in state.aside
    # its reads decide again: predicted to gain, it still earns its trust first
    decision, state = scu.decide(gain, state, units)
    assert [r.kind for r in decision.refusals] == [STEP_ASIDE]
    assert "gain predicted 1 of the" in decision.refusals[0].reason


def test_one_round_without_gain_restarts_the_trust() -> None:
    topo = TOPO_OPTERON_16
    scu = ScuPolicy(topo.units(Unify.LLC), scu_options_for(topo, Unify.LLC), topo.levels)
    units = {VcpuId("vm0", i): i for i in range(4)}
    small, gain = _obs("vm0", 4, 256 * KIB), _obs("vm0", 32, 256 * KIB)
    _, state = scu.decide(small, ScuState(), units)
    _, state = scu.decide(gain, state, units)
    _, state = scu.decide(small, state, units)
    assert state.trusts == {"vm0": 0}


def test_a_vm_whose_vcpus_sit_in_one_unit_is_judged_over_the_units_it_could_span() -> None:
    # OBS keeps a sharing VM's vCPUs in one unit while SCU leaves it alone: SCU must
    # still see what spreading them would gain, or the VM could never be placed again
    topo = TOPO_OPTERON_16
    scu = ScuPolicy(topo.units(Unify.LLC), scu_options_for(topo, Unify.LLC), topo.levels)
    clustered = {VcpuId("vm0", i): 0 for i in range(4)}
    decision, _ = scu.decide(_obs("vm0", 32, 256 * KIB), ScuState(), clustered)
    assert not decision.refusals


def test_work_between_reads_shrinks_the_gain_and_waiting_readers_wait_through_it() -> None:
    # 2 readers, 2 units of one core (a two-chip machine): half the time both want one unit
    chunks = [(256 * KIB, 10)] * 16  # 4 MiB, twice what one unit holds
    read_cycles = sum(OPTERON.read_cycles(s, False) * r for s, r in chunks)
    reads_only = OPTERON.predict_gain(chunks, 2 * MIB, 4 * MIB, 2, readers=2)
    hashing = OPTERON.predict_gain(
        chunks, 2 * MIB, 4 * MIB, 2, readers=2, busy_cycles=20 * read_cycles
    )
    assert reads_only.pays  # the reads alone would gain despite the waits
    assert hashing.fraction < 0  # md5sum-like work: waiting for the unit costs more
