"""OBS's queueing step-aside: vCPUs are held in their LLC groups only where the cache time
a pin could save them is not outweighed by the wait the group's CPUs add."""

from __future__ import annotations

import math

import pytest
from unicache.model import CounterSample, Decision, PinVcpu, ReleaseVcpu, Vcpu, VcpuId, Vm
from unicache.policy.machine import DEFAULT_OFFCHIP_BYTES_PER_CYCLE
from unicache.policy.obs.gain import FLOAT_ROUNDS, OBS_STEP_ASIDE
from unicache.policy.obs.options import obs_options_for
from unicache.policy.obs.policy import ObsPolicy, ObsState
from unicache.policy.obs.queue import (
    MissCost,
    PoolWait,
    confinement,
    erlang_c,
    miss_cost_for,
)
from unicache.topology import CacheUnit

from tests.policy.conftest import observation, sample
from tests.topologies import TOPO_EPYC_2S, TOPO_HOST_2C, TOPO_OPTERON_16

UNITS = TOPO_EPYC_2S.units()  # 16 CCXs of 8 CPUs, 8 to each of 2 nodes
NODE_CPUS = {n: frozenset().union(*(u.cpus for u in UNITS if u.node == n)) for n in (0, 1)}
# misses per 10^9 cycles: 2e-3 a cycle, heavy by OBS's floor (1e-4), x 7.9 cycles a line
# (64 B at epyc-2s's 8.1 B a cycle from DRAM) = 1.6 % of the run time
LIGHT = 2 * 10**6
HEAVY = 12 * 10**7  # 0.12 a cycle: a stream, 95 % of its run time on its misses


# --- the formulas ----------------------------------------------------------------------


def test_erlang_c_gives_the_published_probabilities_of_waiting() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: rho
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # M/M/2: 2 rho^2 / (1 + rho)
    assert erlang_c(10, 6.0) == pytest.approx(0.1013, abs=1e-4)  # the textbook table
    assert erlang_c(8, 8.0) == 1.0 and erlang_c(8, 0.0) == 0.0
    assert 0.0 < erlang_c(512, 500.0) < 1.0  # no overflow at a fleet's CPUs


def test_a_pool_with_a_cpu_for_every_vcpu_has_no_wait_and_a_saturated_one_no_end() -> None:
    assert PoolWait(8, 8, 7.9).wait == 0.0
    assert PoolWait(8, 10, 7.0).wait == pytest.approx(erlang_c(8, 7.0) / 1.0)
    assert PoolWait(8, 40, 8.0).wait == math.inf


def test_the_miss_cost_comes_from_the_model_or_the_documented_defaults() -> None:
    cost = miss_cost_for(TOPO_EPYC_2S)  # 64 B at 8.1 B a cycle, 3.7 GHz
    assert cost.line_cycles == pytest.approx(64 / 8.1) and cost.source == "model"
    host = miss_cost_for(TOPO_HOST_2C)  # sysfs-like: SCU's documented defaults
    assert host.line_cycles == pytest.approx(64 / DEFAULT_OFFCHIP_BYTES_PER_CYCLE)
    assert host.source.startswith("defaults for")
    # misses per cycle x cycles per line; guest lines per ns x ns per line; at most 1
    assert cost.stall_share(1e-2, True) == pytest.approx(1e-2 * 64 / 8.1)
    assert MissCost(30.0, 3.0).stall_share(1e-2, False) == pytest.approx(0.1)
    assert cost.stall_share(1.0, True) == 1.0


# --- the rule, as OBS decides ------------------------------------------------------------


def _fleet(heavy_vms: int = 0, busy: float = 0.7, vms: int = 40) -> tuple[Vm, ...]:
    """``vms`` VMs of 4 vCPUs on epyc-2s, as ``unicache place`` leaves them: each vCPU
    pinned to one CCX and running there, 10 vCPUs to a CCX (160 on 128 CPUs)."""
    out = []
    for k in range(vms):
        name = f"{'heavy' if k < heavy_vms else 'light'}-{k}"
        vcpus = []
        for i in range(4):
            unit = UNITS[(4 * k + i) % len(UNITS)]
            vcpus.append(Vcpu(VcpuId(name, i), None, unit.cpus, min(unit.cpus)))
        out.append(Vm(name, tuple(vcpus)))
    return tuple(out)


def _samples(fleet: tuple[Vm, ...], busy: float = 0.7) -> list[CounterSample]:
    return [
        sample(v.id.vm, v.id.index, HEAVY if v.id.vm.startswith("heavy") else LIGHT, busy)
        for m in fleet
        for v in m.vcpus
    ]


def _decide(
    fleet: tuple[Vm, ...], busy: float = 0.7, unplaced: frozenset[str] | None = None
) -> tuple[Decision, ObsState]:
    policy = ObsPolicy(UNITS, obs_options_for(TOPO_EPYC_2S))
    everyone = frozenset(m.name for m in fleet)
    return policy.decide(
        observation(1, fleet, _samples(fleet, busy)),
        ObsState(),
        everyone,
        everyone if unplaced is None else unplaced,
    )


def _widened(decision: Decision) -> dict[VcpuId, frozenset[int]]:
    return {
        a.vcpu: a.cpus
        for a in decision.actions
        if isinstance(a, PinVcpu) and len(a.cpus) > max(len(u.cpus) for u in UNITS)
    }


def test_light_vcpus_crowded_in_their_ccx_float_over_their_node_and_say_why() -> None:
    # 10 vCPUs at 0.7 busy on 8 CPUs wait 0.64 of a run burst for one; on the node's 64
    # CPUs at the same load 0.03; the cache could save them 1.6 % of their run time
    fleet = _fleet()
    decision, state = _decide(fleet)
    widened = _widened(decision)
    assert set(widened) == {v.id for m in fleet for v in m.vcpus}
    for vcpu, cpus in widened.items():
        assert cpus == NODE_CPUS[UNITS[state.unit_of[vcpu]].node]
    reasons = [r.reason for r in decision.refusals if r.kind == OBS_STEP_ASIDE]
    assert len(reasons) == len(fleet)
    assert reasons[0].startswith("OBS leaves light-0's vCPUs to the host's scheduler")
    assert "8 cpus at load 7, wait 0.635" in reasons[0] and "64 cpus at load 56" in reasons[0]
    assert state.crowded == frozenset(m.name for m in fleet) and not state.pinned
    assert not any(isinstance(a, ReleaseVcpu) for a in decision.actions)


def test_cache_heavy_vcpus_stay_pinned_where_light_ones_float() -> None:
    decision, state = _decide(_fleet(heavy_vms=8))
    widened = {v.vm for v in _widened(decision)}
    assert widened and not any(vm.startswith("heavy") for vm in widened)
    assert {v.vm for v in state.pinned} == {f"heavy-{k}" for k in range(8)}


def test_vcpus_below_the_heavy_floor_in_a_crowded_ccx_float_over_their_node_too() -> None:
    # no cache-heavy vCPU on the host: the first step-aside leaves them on their own
    # CPUs, one CCX each (where ``unicache place`` pinned them); the wait widens them
    fleet = _fleet()
    policy = ObsPolicy(UNITS, obs_options_for(TOPO_EPYC_2S))
    everyone = frozenset(m.name for m in fleet)
    samples = [sample(v.id.vm, v.id.index, 10**4, 0.7) for m in fleet for v in m.vcpus]
    decision, state = policy.decide(observation(1, fleet, samples), ObsState(), everyone)
    assert set(_widened(decision)) == {v.id for m in fleet for v in m.vcpus}
    assert state.crowded == everyone
    reasons = [r.reason for r in decision.refusals if r.kind == OBS_STEP_ASIDE]
    assert len(reasons) == len(fleet) and all("would wait" in r for r in reasons)


def test_vcpus_with_a_cpu_each_in_their_ccx_stay_pinned() -> None:
    # 24 VMs: 96 vCPUs on 128 CPUs, at most 8 to a CCX: a pin makes no one wait
    decision, state = _decide(_fleet(vms=24))
    assert not _widened(decision) and not state.crowded
    assert OBS_STEP_ASIDE not in {r.kind for r in decision.refusals}


def test_nothing_floats_where_the_node_is_as_saturated_as_the_ccx() -> None:
    # vCPUs that always run (the paper's tasks): the node has no idle CPU either
    decision, state = _decide(_fleet(), busy=1.0)
    assert not _widened(decision) and not state.crowded


def test_a_vm_scu_places_keeps_a_vcpu_pinned_in_each_of_its_units() -> None:
    decision, state = _decide(_fleet(), unplaced=frozenset())
    assert not _widened(decision) and not state.crowded


def test_always_place_pins_crowded_vcpus_too() -> None:
    fleet = _fleet()
    policy = ObsPolicy(UNITS, obs_options_for(TOPO_EPYC_2S, step_aside=False))
    everyone = frozenset(m.name for m in fleet)
    decision, state = policy.decide(
        observation(1, fleet, _samples(fleet)), ObsState(), everyone, everyone
    )
    assert not _widened(decision) and not state.crowded


def test_a_machine_whose_llc_group_is_its_node_floats_nothing() -> None:
    # opteron-16: one chip, one L3, one node; a pin confines nothing the node would give
    units = TOPO_OPTERON_16.units()
    assert all(
        u.cpus == frozenset().union(*(w.cpus for w in units if w.node == u.node)) for u in units
    )
    unit_of = {VcpuId(f"v{k}", 0): units[k % 4].id for k in range(24)}
    verdict = confinement(
        units,
        unit_of,
        dict.fromkeys(unit_of, 0.9),
        {},
        {f"v{k}": [VcpuId(f"v{k}", 0)] for k in range(24)},
        frozenset(),
        {},
        frozenset(),
    )
    assert not verdict.crowded


# --- hysteresis ----------------------------------------------------------------------------


def _crowded_unit() -> tuple[tuple[CacheUnit, ...], dict[VcpuId, int], dict[VcpuId, float]]:
    """One VM of 2 vCPUs in CCX 0 among 10 vCPUs at 0.7 busy; the rest of node 0 light."""
    unit_of = {VcpuId("g", i): 0 for i in range(2)}
    unit_of |= {VcpuId("o", i): 0 for i in range(8)}
    unit_of |= {VcpuId("p", i): 1 + i % 7 for i in range(14)}
    return UNITS, unit_of, dict.fromkeys(unit_of, 0.7)


def test_a_pinned_vm_floats_after_three_rounds_and_is_pinned_again_only_on_a_clear_gain() -> None:
    units, unit_of, busy = _crowded_unit()
    g = {"g": [VcpuId("g", 0), VcpuId("g", 1)]}
    cost = PoolWait(8, 10, 7.0).wait - PoolWait(64, 24, 16.8).wait
    assert cost == pytest.approx(PoolWait(8, 10, 7.0).wait)  # 24 vCPUs on 64: no wait
    low = dict.fromkeys(g["g"], cost * 0.9)  # a bound just under the wait
    rounds: dict[str, int] = {}
    crowded: frozenset[str] = frozenset()
    for n in range(1, FLOAT_ROUNDS + 1):
        verdict = confinement(units, unit_of, busy, low, g, crowded, rounds, frozenset({"g"}))
        rounds, crowded = dict(verdict.rounds), verdict.crowded
        assert (crowded == {"g"}) == (n == FLOAT_ROUNDS) and rounds["g"] == n
    # floating: a bound a little over the wait keeps it floating, a clear one pins it
    for factor, floats in ((1.1, True), (1.2, True), (1.3, False)):
        bound = dict.fromkeys(g["g"], cost * factor)
        verdict = confinement(units, unit_of, busy, bound, g, crowded, rounds, frozenset())
        assert (verdict.crowded == {"g"}) == floats, factor
    # a round with the wait under the bound resets the count of a pinned VM
    verdict = confinement(units, unit_of, busy, low, g, frozenset(), {"g": 2}, frozenset({"g"}))
    assert verdict.rounds == {"g": 3} and verdict.crowded == {"g"}
    fine = dict.fromkeys(g["g"], cost * 1.1)
    verdict = confinement(units, unit_of, busy, fine, g, frozenset(), {"g": 2}, frozenset({"g"}))
    assert verdict.rounds == {} and not verdict.crowded


def test_a_vm_that_did_not_run_keeps_its_standing() -> None:
    units, unit_of, busy = _crowded_unit()
    busy |= {VcpuId("g", 0): 0.0, VcpuId("g", 1): 0.0}
    g = {"g": [VcpuId("g", 0), VcpuId("g", 1)]}
    for before in (frozenset(), frozenset({"g"})):
        verdict = confinement(units, unit_of, busy, {}, g, before, {}, frozenset())
        assert verdict.crowded == before
