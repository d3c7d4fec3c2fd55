"""OBS-X, OBS-L and OBS-C of the observations paper, over cache units."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unicache.model import (
    ChunkAccess,
    ChunkId,
    CounterSample,
    CounterSource,
    GuestReport,
    Observation,
    PinVcpu,
    SetCpuWeight,
    Vcpu,
    VcpuId,
    Vm,
)
from unicache.policy.obs.policy import (
    BASE_CPU_WEIGHT,
    C_CREDIT,
    MAX_GUEST_BYTES_PER_NS,
    ObsOptions,
    ObsPolicy,
    ObsState,
    cache_weight,
)

from tests.policy.conftest import observation, sample, vm
from tests.topologies import TOPO_EPYC_2S, TOPO_OPTERON_16, TOPO_XEON_5300

#: opteron-16's CPUs: a VM free to run on every node (one whose CPUs lie on one node has
#: its memory there, and OBS-X keeps it on that node: policy.obs.home)
EVERY_CPU = frozenset(range(16))

UNITS = TOPO_XEON_5300.units()


def test_cache_weight_is_llc_misses_per_cycle_with_hardware_counters() -> None:
    s = CounterSample(VcpuId("a", 0), CounterSource.HARDWARE, cycles=2000, llc_misses=50)
    assert cache_weight(s).value == pytest.approx(0.025)
    assert cache_weight(s).source is CounterSource.HARDWARE


def test_cache_weight_without_misses_uses_guest_bytes_per_task_clock_and_says_so() -> None:
    s = CounterSample(
        VcpuId("a", 0), CounterSource.SOFTWARE, task_clock_ns=1000, guest_bytes=6400
    )
    weight = cache_weight(s, line_size=64)
    assert weight.value == pytest.approx(0.1)
    assert weight.source is CounterSource.SOFTWARE


def test_new_vcpus_go_to_the_lightest_unit() -> None:
    policy = ObsPolicy(UNITS)
    heavy = vm("heavy", 1)
    _, state = policy.decide(observation(0, (heavy,), [sample("heavy", 0, 10**7)]), ObsState())
    assert state.unit_of[VcpuId("heavy", 0)] == 0
    light = vm("light", 1)
    decision, state = policy.decide(
        observation(1, (heavy, light), [sample("heavy", 0, 10**7)]), state
    )
    assert state.unit_of[VcpuId("light", 0)] == 1
    pins = [a for a in decision.actions if isinstance(a, PinVcpu)]
    assert pins and "OBS-X: new vCPU" in pins[-1].reason


def test_idle_new_vcpus_spread_over_the_units_with_the_fewest_vcpus() -> None:
    # one busy vCPU and five idle ones: the idle ones add no cache load, so they do not all
    # follow one another into the lightest unit
    policy = ObsPolicy(UNITS)
    guest = vm("guest", 6)
    _, state = policy.decide(observation(0, (guest,), [sample("guest", 0, 10**7)]), ObsState())
    counts = [sum(1 for u in state.unit_of.values() if u == unit.id) for unit in UNITS]
    assert counts == [3, 3]
    assert state.unit_of[VcpuId("guest", 0)] == 0


def _running(name: str, cpus: list[int]) -> Vm:
    """A VM whose vCPU i runs on host CPU ``cpus[i]``, allowed on all 16 of opteron-16."""
    every = frozenset(range(16))
    return Vm(name, tuple(Vcpu(VcpuId(name, i), None, every, c) for i, c in enumerate(cpus)))


def test_new_vcpus_of_equal_weight_stay_in_the_units_they_run_in() -> None:
    # 16 equally busy readers on opteron-16, vCPU i on CPU i: the load is even as it is,
    # so no vCPU moves to another chip (each move would cost a refill for nothing)
    policy = ObsPolicy(TOPO_OPTERON_16.units())
    guest = _running("g", list(range(16)))
    samples = [sample("g", i, 10**7) for i in range(16)]
    decision, state = policy.decide(observation(0, (guest,), samples), ObsState())
    assert all(state.unit_of[VcpuId("g", i)] == i // 4 for i in range(16))
    pins = [a for a in decision.actions if isinstance(a, PinVcpu)]
    assert all(a.cpus <= frozenset(range(4 * a.unit, 4 * a.unit + 4)) for a in pins)
    assert "stays in unit" in pins[0].reason


def test_a_lone_busy_vcpu_stays_in_the_unit_it_runs_in() -> None:
    policy = ObsPolicy(TOPO_OPTERON_16.units())
    guest = _running("g", [9, *range(1, 9), *range(10, 16), 0])
    _, state = policy.decide(observation(0, (guest,), [sample("g", 0, 10**7)]), ObsState())
    assert state.unit_of[VcpuId("g", 0)] == 2


def test_new_vcpus_crowded_in_one_unit_still_spread() -> None:
    # four busy vCPUs all running on chip 0: one stays, the others go where they are alone
    policy = ObsPolicy(TOPO_OPTERON_16.units())
    guest = _running("g", [0, 1, 2, 3])
    samples = [sample("g", i, 10**7) for i in range(4)]
    _, state = policy.decide(observation(0, (guest,), samples), ObsState())
    assert sorted(state.unit_of.values()) == [0, 1, 2, 3]
    assert state.unit_of[VcpuId("g", 0)] == 0


def test_busy_vcpus_never_share_a_cpu_while_another_unit_has_one_free() -> None:
    # 16 busy vCPUs of different weights (a simulated md5sum's first round) on 16 CPUs in
    # 4 units of 4: by weight alone a light unit takes a fifth vCPU while another keeps a
    # CPU idle
    policy = ObsPolicy(TOPO_OPTERON_16.units())
    guest = vm("guest", 16, EVERY_CPU)
    misses = [22400, 25856, 20160, 26624, 13760, 26752, 15936, 32256, 17600, 20544, 29440,
              17280, 23872, 21888, 12672, 28864]
    samples = [sample("guest", i, m) for i, m in enumerate(misses)]
    state = ObsState()
    for tick in range(12):  # placement, then rebalances every 5 rounds
        _, state = policy.decide(observation(tick, (guest,), samples), state)
        counts = [sum(1 for u in state.unit_of.values() if u == unit.id)
                  for unit in TOPO_OPTERON_16.units()]
        assert counts == [4, 4, 4, 4], (tick, counts)


def _imbalanced() -> tuple[ObsPolicy, ObsState, tuple]:
    # four heavy vCPUs in unit 0, four light ones in unit 1
    policy = ObsPolicy(UNITS, ObsOptions(rebalance_period=5))
    mix = vm("mix", 8)
    unit_of = {VcpuId("mix", i): (0 if i < 4 else 1) for i in range(8)}
    state = ObsState(unit_of=unit_of, last_rebalance=0)
    # heavy weights differ a little, as measured ones do: some are above their unit's average
    samples = [sample("mix", i, 10**7 + i * 10**5 if i < 4 else 10**3) for i in range(8)]
    return policy, state, (mix, samples)


def test_rebalance_moves_one_overweight_vcpu_from_heaviest_to_lightest_unit() -> None:
    policy, state, (mix, samples) = _imbalanced()
    decision, new = policy.decide(observation(5, (mix,), samples), state)
    moved = [v for v in new.unit_of if new.unit_of[v] != state.unit_of[v]]
    assert len(moved) == 1
    assert state.unit_of[moved[0]] == 0 and new.unit_of[moved[0]] == 1
    assert any("rebalance" in a.reason for a in decision.actions if isinstance(a, PinVcpu))


def test_overweight_vcpus_are_not_moved_between_rebalances() -> None:
    policy, state, (mix, samples) = _imbalanced()
    _, new = policy.decide(observation(3, (mix,), samples), state)
    assert new.unit_of == state.unit_of


def test_obs_l_puts_heavy_vcpus_on_one_cpu_so_co_runners_are_light() -> None:
    policy = ObsPolicy(UNITS)
    mix = vm("mix", 4)
    unit_of = {VcpuId("mix", i): 0 for i in range(4)}
    samples = [sample("mix", i, 10**7 if i in (1, 3) else 10**3) for i in range(4)]
    decision, _ = policy.decide(observation(1, (mix,), samples), ObsState(unit_of=unit_of))
    cpus = {a.vcpu.index: a.cpus for a in decision.actions if isinstance(a, PinVcpu)}
    assert cpus[1] == cpus[3] == frozenset({0})
    assert cpus[0] == cpus[2] == frozenset({1})


def test_obs_l_shares_no_cpu_while_the_units_vcpus_leave_cpus_idle() -> None:
    # the same weights, but each vCPU runs 30 % of the time (a latency tenant between its
    # requests): 1.2 CPUs' worth on 2 CPUs, so a runnable vCPU finds an idle CPU, and a
    # pin to one CPU would only make it wait behind that CPU's other vCPUs
    policy = ObsPolicy(UNITS)
    mix = vm("mix", 4)
    unit_of = {VcpuId("mix", i): 0 for i in range(4)}
    samples = [sample("mix", i, 10**7 if i in (1, 3) else 10**3, busy=0.3) for i in range(4)]
    decision, _ = policy.decide(observation(1, (mix,), samples), ObsState(unit_of=unit_of))
    pins = [a for a in decision.actions if isinstance(a, PinVcpu)]
    assert {a.cpus for a in pins} == {UNITS[0].cpus}
    assert all("OBS-L shares no cpu" in a.reason for a in pins)


def test_on_an_oversubscribed_host_new_vcpus_go_where_cpu_time_is_left() -> None:
    # 24 vCPUs on opteron-16's 16 CPUs, each busy 60 %: by cache load alone the light
    # vCPUs would all go to the lightest unit; a unit takes no more than its CPUs can run
    units = TOPO_OPTERON_16.units()
    policy = ObsPolicy(units)
    # three heavy vCPUs take three units; by cache load every light one would follow into
    # the fourth (21 vCPUs, 12.6 CPUs of demand on 4 CPUs)
    vms = tuple(vm(f"v{i:02}", 1, EVERY_CPU) for i in range(24))
    samples = [sample(f"v{i:02}", 0, 10**7 if i < 3 else 10**3, busy=0.6) for i in range(24)]
    _, state = policy.decide(observation(1, vms, samples), ObsState())
    assert len(state.unit_of) == 24
    for unit in units:
        placed = [v for v, u in state.unit_of.items() if u == unit.id]
        assert 0.6 * len(placed) <= len(unit.cpus) + 1e-9


def test_obs_c_credits_light_co_runners_with_the_papers_formula() -> None:
    policy = ObsPolicy(UNITS)
    pair = vm("p", 2)
    unit_of = {VcpuId("p", 0): 0, VcpuId("p", 1): 0}
    w_heavy, w_light = 0.01, 0.002
    samples = [
        sample("p", 0, int(w_heavy * 1e9), busy=1.0),
        sample("p", 1, int(w_light * 1e9), busy=1.0),
    ]
    decision, _ = policy.decide(observation(1, (pair,), samples), ObsState(unit_of=unit_of))
    weights = {a.vcpu.index: a.weight for a in decision.actions if isinstance(a, SetCpuWeight)}
    # t_credit = w_light / (w_largest - w_smallest) * t_overlap * c_credit
    credit = w_light / (w_heavy - w_light) * 1.0 * C_CREDIT
    assert weights[1] == round(BASE_CPU_WEIGHT * (1 + credit))
    assert weights[0] == round(BASE_CPU_WEIGHT * (1 - credit))


def test_obs_c_weights_settle_under_a_steady_noisy_workload() -> None:
    policy = ObsPolicy(UNITS)
    rng = random.Random(3)
    mix = vm("mix", 4)
    state = ObsState(unit_of={VcpuId("mix", i): 0 for i in range(4)})
    changes = []
    for tick in range(1, 30):
        samples = [
            sample("mix", i, int((10**7 if i < 2 else 3 * 10**6) * rng.uniform(0.95, 1.05)))
            for i in range(4)
        ]
        decision, state = policy.decide(observation(tick, (mix,), samples), state)
        changes.append(sum(isinstance(a, SetCpuWeight) for a in decision.actions))
    assert changes[0] > 0 and sum(changes[5:]) == 0, changes


def _steady_run(seed: int, ticks: int) -> list[int]:
    rng = random.Random(seed)
    policy = ObsPolicy(UNITS, ObsOptions(rebalance_period=3))
    affinity = {VcpuId("mix", i): frozenset({0, 1, 2, 3}) for i in range(8)}
    state = ObsState()
    counts = []
    for tick in range(ticks):
        mix = Vm("mix", tuple(Vcpu(v, None, cpus) for v, cpus in sorted(affinity.items())))
        samples = [
            sample("mix", i, int((10**7 if i % 2 == 0 else 10**3) * rng.uniform(0.9, 1.1)))
            for i in range(8)
        ]
        decision, state = policy.decide(observation(tick, (mix,), samples), state)
        pins = [a for a in decision.actions if isinstance(a, PinVcpu)]
        counts.append(len(pins))
        for pin in pins:  # the host applies them
            affinity[pin.vcpu] = pin.cpus
    return counts


def test_steady_noisy_workload_settles_and_stops_moving_vcpus() -> None:
    counts = _steady_run(seed=7, ticks=40)
    assert sum(counts[20:]) == 0, counts


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 10**7), min_size=8, max_size=8), st.integers(0, 20))
def test_same_observations_give_same_actions(misses: list[int], tick: int) -> None:
    policy = ObsPolicy(UNITS)
    mix = vm("mix", 8)
    samples = [sample("mix", i, m) for i, m in enumerate(misses)]
    first = policy.decide(observation(tick, (mix,), samples), ObsState())
    second = policy.decide(observation(tick, (mix,), samples), ObsState())
    assert first == second
    placed = first[1].unit_of
    assert set(placed) == {v.id for v in mix.vcpus}
    assert all(u in {unit.id for unit in UNITS} for u in placed.values())


# --- thread clustering (policy.obs.cluster): vCPUs that share data, SCU leaving their VM alone


def _shared_reads(vmname: str, readers: dict[int, range]) -> GuestReport:
    """A report in which each vCPU reads the given chunks of file 1."""
    by_chunk: dict[int, list[tuple[int, int]]] = {}
    for vcpu, chunks in readers.items():
        for c in chunks:
            by_chunk.setdefault(c, []).append((vcpu, 64 * 1024))
    accesses = tuple(
        ChunkAccess(ChunkId(1, c), sum(b for _, b in pairs), len(pairs), 0, tuple(pairs))
        for c, pairs in sorted(by_chunk.items())
    )
    return GuestReport(vmname, 1, 1.0, accesses)


def _four_busy(vmname: str = "vm0", vcpus: int = 16) -> list[CounterSample]:
    return [
        sample(vmname, i, 10**6 if i < 4 else 0, busy=1.0 if i < 4 else 0.0) for i in range(vcpus)
    ]


def _units_of(state: ObsState, vmname: str, vcpus: range) -> list[int]:
    return [state.unit_of[VcpuId(vmname, i)] for i in vcpus]


def test_busy_vcpus_sharing_data_of_a_vm_scu_leaves_alone_share_one_unit() -> None:
    units = TOPO_OPTERON_16.units()
    policy = ObsPolicy(units)
    guest = vm("vm0", 16, frozenset(range(16)))
    shared = _shared_reads("vm0", {i: range(32) for i in range(4)})
    obs = Observation(0, (guest,), tuple(_four_busy()), (shared,))
    spread = _units_of(policy.decide(obs, ObsState())[1], "vm0", range(4))
    assert len(set(spread)) == 4  # OBS-X alone spreads them
    decision, state = policy.decide(obs, ObsState(), frozenset({"vm0"}))
    assert len(set(_units_of(state, "vm0", range(4)))) == 1
    assert state.clustered == {"vm0"}
    # no unit holds more vCPUs than CPUs: idle vCPUs made room
    assert all(sum(1 for u in state.unit_of.values() if u == unit.id) == 4 for unit in units)
    pins = [a for a in decision.actions if isinstance(a, PinVcpu) and a.vcpu.index < 4]
    assert any("thread clustering" in p.reason for p in pins)


def test_more_sharing_vcpus_than_a_unit_holds_fill_the_fewest_units_of_one_node() -> None:
    # 32 busy vCPUs of a 128-vCPU VM reading the same files on epyc-2s (16 CCXs of 8 cores,
    # 8 to a socket): OBS-X alone spreads them over the CCXs of both sockets
    units = TOPO_EPYC_2S.units()
    policy = ObsPolicy(units)
    guest = vm("vm0", 128, frozenset(range(128)))
    samples = [sample("vm0", i, 10**6 if i < 32 else 0, busy=1.0 if i < 32 else 0.0)
               for i in range(128)]
    shared = _shared_reads("vm0", {i: range(64) for i in range(32)})
    obs = Observation(0, (guest,), tuple(samples), (shared,))
    spread = _units_of(policy.decide(obs, ObsState())[1], "vm0", range(32))
    assert len(set(spread)) > 4
    decision, state = policy.decide(obs, ObsState(), frozenset({"vm0"}))
    clustered = _units_of(state, "vm0", range(32))
    assert len(set(clustered)) == 4  # 32 busy vCPUs, 8 CPUs a unit
    assert len({next(u.node for u in units if u.id == x) for x in clustered}) == 1
    assert all(sum(1 for u in state.unit_of.values() if u == unit.id) <= 8 for unit in units)
    assert state.clustered == {"vm0"}
    # the next round finds them clustered and moves none of them
    _, again = policy.decide(replace(obs, tick=1), state, frozenset({"vm0"}))
    assert again.unit_of == state.unit_of


def test_vcpus_reading_different_data_stay_spread() -> None:
    policy = ObsPolicy(TOPO_OPTERON_16.units())
    own = _shared_reads("vm0", {i: range(8 * i, 8 * i + 8) for i in range(4)})
    obs = Observation(0, (vm("vm0", 16, EVERY_CPU),), tuple(_four_busy()), (own,))
    _, state = policy.decide(obs, ObsState(), frozenset({"vm0"}))
    assert len(set(_units_of(state, "vm0", range(4)))) == 4
    assert not state.clustered


def test_a_clustered_vm_that_scu_unifies_again_is_spread_again_and_says_why() -> None:
    policy = ObsPolicy(TOPO_OPTERON_16.units())
    shared = _shared_reads("vm0", {i: range(32) for i in range(4)})
    obs = Observation(0, (vm("vm0", 16, EVERY_CPU),), tuple(_four_busy()), (shared,))
    _, state = policy.decide(obs, ObsState(), frozenset({"vm0"}))
    decision, state = policy.decide(replace(obs, tick=1), state, frozenset())
    assert len(set(_units_of(state, "vm0", range(4)))) == 4
    assert not state.clustered
    assert any("SCU unifies vm0 again" in a.reason for a in decision.actions)


def test_a_cluster_survives_rebalances() -> None:
    policy = ObsPolicy(TOPO_OPTERON_16.units(), ObsOptions(rebalance_period=1))
    shared = _shared_reads("vm0", {i: range(32) for i in range(4)})
    state = ObsState()
    for tick in range(8):
        obs = Observation(tick, (vm("vm0", 16, EVERY_CPU),), tuple(_four_busy()), (shared,))
        _, state = policy.decide(obs, state, frozenset({"vm0"}))
        assert len(set(_units_of(state, "vm0", range(4)))) == 1


def test_clustering_never_moves_another_vms_vcpus() -> None:
    # two units of two CPUs; vm a's busy sharing vCPUs could only meet by displacing vm b's
    policy = ObsPolicy(UNITS)
    a, b = vm("a", 2), vm("b", 2)
    samples = [sample("a", i, 10**6, busy=1.0) for i in range(2)]
    samples += [sample("b", i, 0, busy=0.0) for i in range(2)]
    reads = _shared_reads("a", {0: range(8), 1: range(8)})
    obs = Observation(0, (a, b), tuple(samples), (reads,))
    _, before = policy.decide(obs, ObsState())
    _, after = policy.decide(replace(obs, tick=1), before, frozenset({"a"}))
    assert _units_of(after, "b", range(2)) == _units_of(before, "b", range(2))
    assert sorted(_units_of(after, "a", range(2))) == sorted(_units_of(before, "a", range(2)))


def _software(vmname: str, index: int, nbytes: int) -> CounterSample:
    """A host without LLC counters: the guest's reported bytes over the vCPU's task clock."""
    return CounterSample(VcpuId(vmname, index), CounterSource.SOFTWARE, busy=1.0,
                         guest_bytes=nbytes, task_clock_ns=10**9)


def _pins_of_honest_vm(forged_bytes: int) -> tuple[dict[VcpuId, int], dict[VcpuId, frozenset]]:
    """A 12-vCPU VM reporting ``forged_bytes`` per vCPU from its first vCPUs, then an
    honest 8-vCPU VM arriving, on opteron-16 without LLC counters (20 vCPUs on 16 CPUs),
    for five rounds with a rebalance each: the honest VM's units and CPU sets."""
    policy = ObsPolicy(TOPO_OPTERON_16.units(), ObsOptions(rebalance_period=1))
    forger, honest = vm("forger", 12, frozenset(range(16))), vm("honest", 8, frozenset(range(16)))
    state = ObsState()
    cpus: dict[VcpuId, frozenset] = {}
    for tick in range(5):
        samples = [_software("forger", i, forged_bytes if i < 9 else 0) for i in range(12)]
        samples += [_software("honest", i, (i + 1) << 26) for i in range(8)]
        vms = (forger,) if tick == 0 else (forger, honest)
        decision, state = policy.decide(observation(tick, vms, samples), state)
        cpus.update({a.vcpu: a.cpus for a in decision.actions
                     if isinstance(a, PinVcpu) and a.vcpu.vm == "honest"})
    units = {v: u for v, u in state.unit_of.items() if v.vm == "honest"}
    return units, cpus


def test_forged_byte_counts_never_change_where_another_vms_vcpus_are_pinned() -> None:
    # issue #12: a VM that reported 2**63 bytes got three units to itself and eight
    # honest vCPUs ended up two per CPU on the fourth
    honest_world = _pins_of_honest_vm(1 << 20)
    for forged in (1 << 40, 1 << 62, 2**63 - 1):
        assert _pins_of_honest_vm(forged) == honest_world, forged
    units, _ = honest_world
    assert len(set(units.values())) == 4  # spread over the four chips, not crowded in one


def _cpu_weights_of_honest_vm(forged_bytes: int) -> list[tuple[int, VcpuId, int]]:
    """The forger and the honest VM of :func:`_pins_of_honest_vm` sharing opteron-16's
    units, the honest vCPUs of unequal weight: the honest VM's SetCpuWeight actions."""
    policy = ObsPolicy(TOPO_OPTERON_16.units(), ObsOptions(rebalance_period=1))
    forger, honest = vm("forger", 12, frozenset(range(16))), vm("honest", 8, frozenset(range(16)))
    state = ObsState()
    out: list[tuple[int, VcpuId, int]] = []
    for tick in range(5):
        samples = [_software("forger", i, forged_bytes if i % 2 else 0) for i in range(12)]
        samples += [_software("honest", i, (1 + 7 * (i % 2)) << 26) for i in range(8)]
        vms = (forger,) if tick == 0 else (forger, honest)
        decision, state = policy.decide(observation(tick, vms, samples), state)
        out += [(tick, a.vcpu, a.weight) for a in decision.actions
                if isinstance(a, SetCpuWeight) and a.vcpu.vm == "honest"]
    return out


def test_forged_byte_counts_never_change_another_vms_cpu_weights() -> None:
    # issue #12: OBS-C credited CPU time by every co-runner's weight, so a VM reporting
    # 2**63 bytes made itself the heavy co-runner of honest vCPUs and set their cpu.weight
    honest_world = _cpu_weights_of_honest_vm(1 << 20)
    for forged in (1 << 40, 1 << 50, 1 << 62, 2**63 - 1):
        assert _cpu_weights_of_honest_vm(forged) == honest_world, forged
    # the honest VM's own unequal vCPUs still get OBS-C's credit from one another
    assert any(w != BASE_CPU_WEIGHT for _, _, w in honest_world)


def test_a_guests_reported_bytes_weigh_no_more_than_a_core_can_read() -> None:
    weight = cache_weight(_software("g", 0, 2**63 - 1)).value
    assert weight == pytest.approx(MAX_GUEST_BYTES_PER_NS / 64)
    assert cache_weight(_software("g", 0, 64 * 10**6)).value == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "demand", [2.0, 1.9999, 1.97], ids=["exactly", "a hair under", "2 % under"]
)
def test_obs_l_pairs_always_running_vcpus_whose_task_clocks_sum_a_hair_under_the_cpus(
    demand: float,
) -> None:
    # four always-running vCPUs on the two CPUs of one unit: their task clocks sum to the
    # CPUs or a hair under (the scheduler's own time); OBS-L pairs them every round, where
    # it once paired them at 2.0 and let them float at 1.9999 (unicache-sim obs, pairs)
    from unicache.policy.obs.local import local_sets

    unit = TOPO_XEON_5300.units()[0]  # LLC group 0: CPUs 0 and 1
    members = [VcpuId(f"v{i}", 0) for i in range(4)]
    weights = {v: (0.01 if i < 2 else 0.0) for i, v in enumerate(members)}
    busy = {v: demand / 4 for v in members}
    sets = local_sets(unit, members, weights, frozenset(members), busy=busy)
    assert [cpus for _, cpus, _ in sets] == [frozenset({0})] * 2 + [frozenset({1})] * 2


def test_obs_l_leaves_a_unit_with_idle_time_unpaired() -> None:
    from unicache.policy.obs.local import local_sets

    unit = TOPO_XEON_5300.units()[0]  # LLC group 0: CPUs 0 and 1
    members = [VcpuId(f"v{i}", 0) for i in range(4)]
    weights = {v: (0.01 if i < 2 else 0.0) for i, v in enumerate(members)}
    busy = {v: 0.45 for v in members}  # 1.8 of 2 CPUs: a runnable vCPU finds an idle one
    sets = local_sets(unit, members, weights, frozenset(members), busy=busy)
    assert all(cpus == unit.cpus for _, cpus, _ in sets)
