"""OBS steps aside: a VM whose pins would keep no two cache-heavy vCPUs apart keeps its CPUs."""

from __future__ import annotations

from unicache.decisionlog import action_record
from unicache.model import (
    CounterSample,
    CounterSource,
    Decision,
    PinVcpu,
    ReleaseVcpu,
    VcpuId,
    Vm,
)
from unicache.policy.obs.gain import FLOAT_ROUNDS, OBS_STEP_ASIDE
from unicache.policy.obs.policy import ObsPolicy, ObsState
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.readback import explain

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


def test_a_lone_heavy_vcpu_of_a_vm_scu_leaves_alone_is_never_pinned() -> None:
    policy = ObsPolicy(UNITS)
    guest = vm("g", 4, EVERY)
    decisions, state = _rounds(policy, (guest,), [sample("g", 0, HEAVY)], FLOAT_ROUNDS + 1)
    for decision in decisions:
        assert not any(isinstance(a, PinVcpu | ReleaseVcpu) for a in decision.actions)
        (why,) = [r.reason for r in decision.refusals if r.kind == OBS_STEP_ASIDE]
        assert why.startswith("OBS leaves g's vCPUs on their own CPUs: one cache-heavy vCPU")
    assert state.pinned == frozenset()


def test_a_pinned_vm_down_to_one_heavy_vcpu_is_released_after_three_rounds() -> None:
    policy = ObsPolicy(UNITS)
    guest = vm("g", 4, EVERY)
    two = [sample("g", 0, HEAVY), sample("g", 1, HEAVY)]
    first, state = _rounds(policy, (guest,), two, 1)
    assert any(isinstance(a, PinVcpu) for a in first[0].actions)
    # every vCPU has a sample each round, as on a live host: vCPU 1 now idles
    one = [sample("g", 0, HEAVY), sample("g", 1, 0)]
    decisions, state = _rounds(policy, (guest,), one, FLOAT_ROUNDS + 2, state=state)
    before = decisions[: FLOAT_ROUNDS - 1]
    assert all(OBS_STEP_ASIDE not in _kinds(d) for d in before)
    assert not any(isinstance(a, ReleaseVcpu) for d in before for a in d.actions)
    released = decisions[FLOAT_ROUNDS - 1]
    assert {a.vcpu for a in released.actions if isinstance(a, ReleaseVcpu)} == {
        VcpuId("g", i) for i in range(4)
    }
    assert not any(isinstance(a, PinVcpu) for a in released.actions)
    (why,) = [r.reason for r in released.refusals if r.kind == OBS_STEP_ASIDE]
    assert "one cache-heavy vCPU (g/vcpu0)" in why and "3 rounds" in why
    # released once; afterwards it floats, says so, and nothing is pinned or released
    for later in decisions[FLOAT_ROUNDS:]:
        assert not any(isinstance(a, PinVcpu | ReleaseVcpu) for a in later.actions)
        assert OBS_STEP_ASIDE in _kinds(later)
    assert state.pinned == frozenset()


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


def test_a_vm_without_a_guest_agent_is_never_pinned_for_one_heavy_vcpu() -> None:
    # SCU can place only VMs whose guests report reads: one without an agent needs no
    # vCPU pinned in every unit, so its lone heavy vCPU floats like a left-alone one's
    policy = UnicachePolicy(TOPO_OPTERON_16)
    guest = vm("g", 4, EVERY)
    state = RoundState()
    for tick in range(FLOAT_ROUNDS + 1):
        decision, state = policy.decide(
            observation(tick, (guest,), [sample("g", 0, HEAVY)]), state
        )
        assert {str(a.kind) for a in decision.actions} <= {"set-cpu-weight"}
        assert OBS_STEP_ASIDE in _kinds(decision)
    two = [sample("g", 0, HEAVY), sample("g", 1, HEAVY)]
    decision, state = policy.decide(observation(9, (guest,), two), state)
    assert any(isinstance(a, PinVcpu) for a in decision.actions)


def test_explain_says_a_released_vcpu_sits_on_its_own_cpus() -> None:
    pin = PinVcpu(VcpuId("g", 0), frozenset({0, 1}), 0, "OBS-X: placed")
    release = ReleaseVcpu(VcpuId("g", 0), "OBS leaves g's vCPUs on their own CPUs")
    records = [action_record(1, pin), action_record(4, release)]
    found = explain(records, "g", 0)
    assert found.vcpus[0]["kind"] == "release-vcpu"
    assert [r["kind"] for r in found.history] == ["pin-vcpu", "release-vcpu"]
