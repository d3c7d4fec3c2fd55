"""OBS-X keeps a vCPU on its home nodes, where its VM's memory is: a move to a lighter LLC
group on another node would make every one of its misses remote (issue #16's streams)."""

from __future__ import annotations

from unicache.model import Vcpu, VcpuId, Vm
from unicache.policy.machine import DEFAULT_REMOTE_GAP, remote_gap_for
from unicache.policy.obs.home import OBS_HOME_NODE, home_nodes
from unicache.policy.obs.options import obs_options_for
from unicache.policy.obs.policy import ObsPolicy, ObsState

from tests.policy.conftest import observation, sample
from tests.topologies import TOPO_EPYC_2S, TOPO_HOST_2C

UNITS = TOPO_EPYC_2S.units()  # 16 CCXs of 8 CPUs, 8 to each of 2 nodes
NODE_OF_UNIT = {u.id: u.node for u in UNITS}
NODE0 = frozenset(range(64))
EVERYWHERE = frozenset(range(128))
# a stream's vCPU: a miss every 8 cycles, most of its run time on DRAM
STREAM = 125 * 10**6


def _vm(name: str, vcpus: int, cpus: frozenset[int]) -> Vm:
    return Vm(name, tuple(Vcpu(VcpuId(name, i), None, cpus) for i in range(vcpus)))


def _policy() -> ObsPolicy:
    return ObsPolicy(UNITS, obs_options_for(TOPO_EPYC_2S))


def test_vcpus_placed_on_a_node_stay_there_though_the_other_node_is_empty() -> None:
    # 12 streams' vCPUs placed on node 0 (memory strict there): 8 units of node 0 take
    # them, none goes to node 1's empty units
    guest = _vm("s", 12, NODE0)
    samples = [sample("s", i, STREAM) for i in range(12)]
    decision, state = _policy().decide(observation(0, (guest,), samples), ObsState())
    assert {NODE_OF_UNIT[u] for u in state.unit_of.values()} == {0}
    assert len(set(state.unit_of.values())) == 8  # spread over node 0's units
    assert state.homes[VcpuId("s", 0)] == frozenset({0})


def test_keeping_a_vcpu_home_is_logged_with_the_remote_cost_it_avoids() -> None:
    guest = _vm("s", 12, NODE0)
    samples = [sample("s", i, STREAM) for i in range(12)]
    decision, _ = _policy().decide(observation(0, (guest,), samples), ObsState())
    kept = [r for r in decision.refusals if r.kind == OBS_HOME_NODE]
    # the first 8 vCPUs find an empty unit at home; the last 4 would have gone to node 1
    assert len(kept) == 4
    assert "where its memory is" in kept[0].reason
    assert "latency gap 0.80" in kept[0].reason  # epyc-2s: (767 - 426) / 426


def test_a_vcpu_free_to_run_anywhere_has_no_home_and_spreads_over_both_nodes() -> None:
    guest = _vm("s", 12, EVERYWHERE)
    samples = [sample("s", i, STREAM) for i in range(12)]
    decision, state = _policy().decide(observation(0, (guest,), samples), ObsState())
    assert {NODE_OF_UNIT[u] for u in state.unit_of.values()} == {0, 1}
    assert len(set(state.unit_of.values())) == 12
    assert not state.homes
    assert not [r for r in decision.refusals if r.kind == OBS_HOME_NODE]


def test_rebalance_moves_an_overweight_vcpu_only_within_its_home_node() -> None:
    # unit 0 holds four heavy vCPUs, units 1-7 of node 0 a light one each, node 1 is
    # empty: the rebalance's lightest unit is on node 1, but the move stays on node 0
    heavy = _vm("h", 4, NODE0)
    light = _vm("l", 7, NODE0)
    unit_of = {VcpuId("h", i): 0 for i in range(4)}
    unit_of |= {VcpuId("l", i): i + 1 for i in range(7)}
    homes = dict.fromkeys(unit_of, frozenset({0}))
    state = ObsState(unit_of=unit_of, homes=homes, last_rebalance=0)
    samples = [sample("h", i, STREAM + i) for i in range(4)]
    samples += [sample("l", i, 10**6) for i in range(7)]
    _, after = _policy().decide(observation(5, (heavy, light), samples), state)
    moved = [v for v in unit_of if after.unit_of[v] != unit_of[v]]
    assert len(moved) == 1
    assert NODE_OF_UNIT[after.unit_of[moved[0]]] == 0


def test_a_vcpu_obs_pinned_itself_gets_no_home_from_its_pin() -> None:
    # OBS placed it before (it is in unit_of) without a home: its pin is OBS's, not the
    # placement's memory binding
    seen = VcpuId("s", 0)
    guest = _vm("s", 1, frozenset(range(8)))
    homes = home_nodes(observation(1, (guest,), []), UNITS, {}, [seen])
    assert homes == {}


def test_the_latency_gap_comes_from_the_model_or_the_papers_opteron() -> None:
    gap, source = remote_gap_for(TOPO_EPYC_2S)
    assert gap == (767 - 426) / 426
    assert "epyc-2s" in source
    gap, source = remote_gap_for(TOPO_HOST_2C)
    assert gap == DEFAULT_REMOTE_GAP
    assert "Opteron 246" in source
