"""The round state across daemon restarts (unicache.policystate): what the policies
learned comes back whole; what the shutdown undid does not; a bad file is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from unicache import policystate
from unicache.errors import StateError
from unicache.model import (
    ChunkAccess,
    ChunkId,
    GuestReport,
    Observation,
    PublishPlacement,
    VcpuId,
)
from unicache.policy.obs.policy import ObsState
from unicache.policy.round import RoundState, UnicachePolicy
from unicache.topology import Unify

from tests.policy.conftest import sample
from tests.policy.test_colors_replicas import _remote, _stream, _vm
from tests.topologies import TOPO_OPTERON_16


def _lived_state(rounds: int = 4) -> RoundState:
    """A state after a few rounds of every policy: pins, weights, a table, colors, replicas."""
    vm = _vm(colored=2, cpu_nodes=2)
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC, color_step_aside=False)
    state = RoundState()
    for tick in range(rounds):
        reads = GuestReport("vm0", 100 + tick, 1.0, tuple(
            ChunkAccess(ChunkId(3, i), 256 * 1024, 1, 0, ((i % 2, 256 * 1024),))
            for i in range(32)
        ))
        reports = (_stream("vm0", 7, range(4 * tick, 4 * tick + 4), seq=tick),
                   _remote("vm0", ChunkId(5, 0), 0, 1, 2, seq=50 + tick), reads)
        samples = tuple(sample("vm0", v.id.index, 10**6 * (1 + v.id.index)) for v in vm.vcpus)
        _, state = policy.decide(Observation(tick, (vm,), samples, reports), state)
    return state


def test_a_lived_state_comes_back_equal_through_json() -> None:
    state = _lived_state()
    assert state.scu.table is not None and state.colors.vms and state.replicas.vms
    assert state.obs.unit_of and state.scu.versions
    back = policystate.decode(json.loads(json.dumps(policystate.encode(state))))
    # what the published tables were built on is not saved: a restart publishes them again
    assert state.scu.built_on and back.scu.built_on == {} and back.scu.built_extras == {}
    assert back == replace(state, scu=replace(state.scu, built_on={}, built_extras={}))
    # the table's per-unit sums are rebuilt, not trusted from the file
    for unit in TOPO_OPTERON_16.units():
        assert back.scu.table is not None
        assert back.scu.table.assigned_bytes(unit.id) == state.scu.table.assigned_bytes(unit.id)


def test_obs_home_nodes_come_back_through_json() -> None:
    state = RoundState(obs=ObsState(homes={VcpuId("vm0", 0): frozenset({1}),
                                           VcpuId("vm0", 1): frozenset({0, 1})}))
    back = policystate.decode(json.loads(json.dumps(policystate.encode(state))))
    assert back == state


def test_a_restart_keeps_what_was_learned_and_forgets_what_the_shutdown_undid() -> None:
    state = _lived_state()
    kept = policystate.after_restart(state)
    assert kept.scu.table == state.scu.table and kept.scu.versions == state.scu.versions
    assert kept.scu.watched == state.scu.watched and kept.obs.unit_of == state.obs.unit_of
    assert not kept.obs.pinned and not kept.obs.cpu_weights and not kept.scu.published
    # nor what they were built on: every VM's table is built and sent again
    assert not kept.scu.built_on and not kept.scu.built_extras


def test_a_restart_publishes_every_table_again_even_one_whose_inputs_did_not_change() -> None:
    state = _lived_state()
    policy = UnicachePolicy(TOPO_OPTERON_16, Unify.LLC, color_step_aside=False)
    vm = _vm(colored=2, cpu_nodes=2)
    samples = tuple(sample("vm0", v.id.index, 10**6 * (1 + v.id.index)) for v in vm.vcpus)
    quiet = Observation(99, (vm,), samples, ())
    same, _ = policy.decide(quiet, state)
    again, _ = policy.decide(quiet, policystate.after_restart(state))
    tables = [a for a in again.actions if isinstance(a, PublishPlacement)]
    assert not [a for a in same.actions if isinstance(a, PublishPlacement)]
    assert [t.vm for t in tables] == ["vm0"]
    assert tables[0].table.entries == state.scu.published["vm0"]


def test_the_state_is_saved_private_and_checked(tmp_path: Path) -> None:
    state = _lived_state(2)
    policystate.save(tmp_path, state)
    path = tmp_path / policystate.STATE_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert policystate.load(tmp_path) == policystate.after_restart(state)
    doc = json.loads(path.read_text())
    doc["payload"]["scu"]["round"] += 1  # edited by hand: the checksum no longer holds
    path.write_text(json.dumps(doc))
    with pytest.raises(StateError, match="checksum"):
        policystate.load(tmp_path)


def test_a_state_of_another_shape_is_refused_not_guessed(tmp_path: Path) -> None:
    policystate.checkpoint(tmp_path).save({"obs": {"unit_of": "everything"}})
    with pytest.raises(StateError, match="does not decode"):
        policystate.load(tmp_path)
    assert policystate.load(tmp_path / "nothing-here") is None


def test_a_file_of_the_format_before_lazy_aging_loads_and_aged_counts_save_current() -> None:
    # 8 rounds: SCU aged twice (lazily); the file holds every chunk's counts as they are
    # now, without the agings they are current to, as before aging was lazy
    state = _lived_state(rounds=8)
    doc = json.loads(json.dumps(policystate.encode(state)))
    assert all("aged" not in chunk for _, chunk in doc["scu"]["table"]["chunks"])
    unbuilt = replace(state, scu=replace(state.scu, built_on={}, built_extras={}))
    assert policystate.decode(doc) == unbuilt
    # a file of an earlier build, which saved what the tables were built on, loads
    doc["scu"]["built_on"] = [["vm0", [False, [[0, 1]]]]]
    doc["scu"]["built_extras"] = [["vm0", [[{"file_id": 3, "index": 0}, {"color_node": 1}]]]]
    assert policystate.decode(doc) == unbuilt
