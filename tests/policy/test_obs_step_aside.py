"""OBS steps aside: a VM whose pins would keep no two cache-heavy vCPUs apart keeps its CPUs."""

from __future__ import annotations

from unicache.model import (
    CounterSample,
    CounterSource,
    Decision,
    PinVcpu,
    ReleaseVcpu,
    VcpuId,
    Vm,
)
from unicache.policy.obs import ObsPolicy, ObsState
from unicache.policy.obsgain import FLOAT_ROUNDS, OBS_STEP_ASIDE

from tests.policy.conftest import observation, sample, vm
from tests.topologies import TOPO_OPTERON_16

UNITS = TOPO_OPTERON_16.units()
EVERY = frozenset(range(16))
HEAVY = 10**7  # misses per 10^9 cycles: far above heavy_weight_floor
ALONE = frozenset({"g"})


def _rounds(
    policy: ObsPolicy,
    vms: tuple[Vm, ...],
    samples: list[CounterSample],
    n: int,
    left_alone: frozenset[str] = ALONE,
    state: ObsState | None = None,
) -> tuple[list[Decision], ObsState]:
    state = state or ObsState()
    out = []
    for tick in range(n):
        decision, state = policy.decide(observation(tick, vms, samples), state, left_alone)
        out.append(decision)
    return out, state


def _kinds(decision: Decision) -> set[str]:
    return {r.kind for r in decision.refusals}


def test_a_lone_heavy_vcpu_of_a_vm_scu_leaves_alone_is_released_after_three_rounds() -> None:
    policy = ObsPolicy(UNITS)
    guest = vm("g", 4, EVERY)
    decisions, state = _rounds(policy, (guest,), [sample("g", 0, HEAVY)], FLOAT_ROUNDS + 2)
    before = decisions[: FLOAT_ROUNDS - 1]
    assert all(any(isinstance(a, PinVcpu) for a in d.actions) for d in before)
    assert all(OBS_STEP_ASIDE not in _kinds(d) for d in before)
    released = decisions[FLOAT_ROUNDS - 1]
    assert {a.vcpu for a in released.actions if isinstance(a, ReleaseVcpu)} == {
        VcpuId("g", i) for i in range(4)
    }
    assert not any(isinstance(a, PinVcpu) for a in released.actions)
    (why,) = [r.reason for r in released.refusals if r.kind == OBS_STEP_ASIDE]
    assert "one cache-heavy vCPU (g/vcpu0)" in why and "3 rounds" in why
    # released once; afterwards it floats, says so, and nothing is pinned or released
    for later in decisions[FLOAT_ROUNDS:]:
        assert not later.actions or all(
            not isinstance(a, PinVcpu | ReleaseVcpu) for a in later.actions
        )
        assert OBS_STEP_ASIDE in _kinds(later)
    assert state.pinned == frozenset()


def test_a_second_heavy_vcpu_pins_the_floating_vm_again_at_once() -> None:
    policy = ObsPolicy(UNITS)
    guest = vm("g", 4, EVERY)
    _, state = _rounds(policy, (guest,), [sample("g", 0, HEAVY)], FLOAT_ROUNDS + 1)
    two = [sample("g", 0, HEAVY), sample("g", 1, HEAVY)]
    decision, state = policy.decide(observation(9, (guest,), two), state, ALONE)
    pinned = {a.vcpu for a in decision.actions if isinstance(a, PinVcpu)}
    assert {VcpuId("g", 0), VcpuId("g", 1)} <= pinned
    assert OBS_STEP_ASIDE not in _kinds(decision)
    # and the two heavy vCPUs are kept apart
    assert state.unit_of[VcpuId("g", 0)] != state.unit_of[VcpuId("g", 1)]


def test_a_vm_scu_unifies_stays_pinned_with_one_heavy_vcpu() -> None:
    policy = ObsPolicy(UNITS)
    guest = vm("g", 4, EVERY)
    decisions, _ = _rounds(
        policy, (guest,), [sample("g", 0, HEAVY)], FLOAT_ROUNDS + 2, left_alone=frozenset()
    )
    assert all(OBS_STEP_ASIDE not in _kinds(d) for d in decisions)
    assert not any(isinstance(a, ReleaseVcpu) for d in decisions for a in d.actions)
    assert all(any(isinstance(a, PinVcpu) for a in d.actions) for d in decisions)


def test_a_heavy_vcpu_the_host_measured_in_another_vm_keeps_the_vm_pinned() -> None:
    policy = ObsPolicy(UNITS)
    guest, other = vm("g", 2, EVERY), vm("o", 2, EVERY)
    samples = [sample("g", 0, HEAVY), sample("o", 0, HEAVY)]
    decisions, _ = _rounds(policy, (guest, other), samples, FLOAT_ROUNDS + 2)
    assert all(OBS_STEP_ASIDE not in _kinds(d) for d in decisions)
    assert not any(isinstance(a, ReleaseVcpu) for d in decisions for a in d.actions)


def test_another_guests_word_never_decides_whether_a_vm_is_pinned() -> None:
    # on a host without LLC counters, a guest claiming two heavy vCPUs keeps its own VM
    # pinned, but the honest lone reader beside it still floats
    policy = ObsPolicy(UNITS)
    guest, forger = vm("g", 2, EVERY), vm("f", 2, EVERY)

    def software(name: str, index: int) -> CounterSample:
        return CounterSample(
            VcpuId(name, index),
            CounterSource.SOFTWARE,
            busy=1.0,
            task_clock_ns=10**9,
            guest_bytes=64 * 10**8,
        )

    samples = [software("g", 0), software("f", 0), software("f", 1)]
    decisions, state = _rounds(
        policy, (guest, forger), samples, FLOAT_ROUNDS + 1, left_alone=frozenset({"g", "f"})
    )
    reasons = [r.reason for r in decisions[-1].refusals if r.kind == OBS_STEP_ASIDE]
    assert len(reasons) == 1 and reasons[0].startswith("OBS leaves g's vCPUs")
    assert {v.vm for v in state.pinned} == {"f"}
