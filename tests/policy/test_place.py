"""Placement of a new VM on the lightest units (OBS-X's rule for new tasks)."""

from __future__ import annotations

import pytest
from unicache.errors import PolicyRefusal
from unicache.policy.place import UnitLoad, libvirt_fragment, place_vm

from tests.topologies import TOPO_EPYC_2S, TOPO_XEON_5300

EPYC = TOPO_EPYC_2S


def test_vcpus_spread_over_the_lightest_units_and_memory_follows_them() -> None:
    units = EPYC.units()
    busy = {u.id for u in units if u.node == 0}  # every CCX of socket 0 is loaded
    loads = tuple(
        UnitLoad(u, cache_load=0.5 if u.id in busy else 0.0, vcpus=4 if u.id in busy else 0)
        for u in units
    )
    proposal = place_vm(loads, 4, memory_bytes=8 << 30, nodes=EPYC.nodes)
    chosen = {p.unit for p in proposal.vcpus}
    assert len(chosen) == 4 and chosen.isdisjoint(busy)  # the idle socket's CCXs
    assert proposal.node == 1
    assert proposal.emulator_cpus.isdisjoint(set().union(*(p.cpus for p in proposal.vcpus)))


def test_new_vcpus_count_as_average_weight_so_a_vm_does_not_stack_on_one_unit() -> None:
    units = TOPO_XEON_5300.units()
    loads = (UnitLoad(units[0], 0.2, 1), UnitLoad(units[1], 0.0, 0))
    proposal = place_vm(loads, 3)
    assert [p.unit for p in proposal.vcpus] == [1, 0, 1]


def test_fragment_pins_every_vcpu_and_the_emulator() -> None:
    proposal = place_vm(tuple(UnitLoad(u) for u in EPYC.units()), 2, 1 << 30, nodes=EPYC.nodes)
    xml = libvirt_fragment(proposal)
    assert "<vcpupin vcpu='0' cpuset='0-7'/>" in xml
    assert "<vcpupin vcpu='1' cpuset='8-15'/>" in xml
    assert "<emulatorpin cpuset='16-23'/>" in xml
    assert "<memory mode='preferred' nodeset='0'/>" in xml


def test_zero_vcpus_is_refused_with_a_stable_kind() -> None:
    with pytest.raises(PolicyRefusal) as err:
        place_vm(tuple(UnitLoad(u) for u in EPYC.units()), 0)
    assert err.value.kind == PolicyRefusal.CPUS_EXHAUSTED
