"""A fleet of arrivals packed on one modelled host with the placement function."""

from __future__ import annotations

import json

import pytest
from unicache.errors import ConfigError, PolicyRefusal
from unicache.policy.place.fleet import Arrival, parse_arrivals, place_fleet
from unicache.policy.place.options import PlaceOptions, Profile
from unicache.policy.place.room import flavor_weight, host_room
from unicache.policy.place.types import PlacedVm, VmRequest
from unicache.policy.place.vm import place_vm
from unicache.topology import Unify

from tests.topologies import TOPO_EPYC_2S, TOPO_OPTERON_16

TOML = """
# a mixed fleet
[[vm]]
flavor = "db"
vcpus = 8
memory_mib = 65536
profile = "compact"
count = 4
cache_weight = 0.1

[[vm]]
flavor = "stream"
vcpus = 4
memory_mib = 16384
profile = "spread"
count = 2
cache_weight = 2.0

[[vm]]
flavor = "stream"
vcpus = 4
memory_mib = 16384
profile = "auto"

[[vm]]
flavor = "huge"
vcpus = 96
memory_mib = 300000
"""


def test_toml_and_json_lines_give_the_same_arrivals() -> None:
    lines = "\n".join([
        "# the same fleet as JSON lines",
        json.dumps({"flavor": "db", "vcpus": 8, "memory_mib": 65536, "profile": "compact",
                    "count": 4, "cache_weight": 0.1}),
        json.dumps({"flavor": "stream", "vcpus": 4, "memory_mib": 16384, "profile": "spread",
                    "count": 2, "cache_weight": 2.0}),
        "",
        json.dumps({"flavor": "stream", "vcpus": 4, "memory_mib": 16384, "profile": "auto"}),
        json.dumps({"flavor": "huge", "vcpus": 96, "memory_mib": 300000}),
    ])
    from_toml = parse_arrivals(TOML, "fleet.toml")
    assert parse_arrivals(lines, "fleet.jsonl") == from_toml
    assert [a.request.name for a in from_toml] == [
        "db-1", "db-2", "db-3", "db-4", "stream-1", "stream-2", "stream-3", "huge-1"]
    assert from_toml[0] == Arrival(VmRequest("db-1", 8, 65536, Profile.COMPACT, "db"), 0.1)


def test_a_fleet_reports_placements_refusals_and_loads() -> None:
    result = place_fleet(TOPO_EPYC_2S, parse_arrivals(TOML, "fleet.toml"))
    assert [p.request.name for p in result.placed] == [
        "db-1", "db-2", "db-3", "db-4", "stream-1", "stream-2", "stream-3"]
    # the db VMs alternate between the sockets, one whole CCX each
    assert [(p.nodes, p.units) for p in result.placed[:4]] == [
        ((0,), (0,)), ((1,), (8,)), ((0,), (1,)), ((1,), (9,))]
    # stream-3 asks auto: its flavor was observed at 2.0 per vCPU, above the host: spread
    assert result.placed[6].profile is Profile.SPREAD
    assert "above the host's" in result.placed[6].reasons[1]
    # ... first onto node 0's two CCXs nothing heavy sits in (OBS-X: the lightest)
    assert result.placed[4].units == (2, 3, 4, 5) and result.placed[6].nodes == (0,)
    assert {6, 7} <= set(result.placed[6].units)
    assert [(r.request.name, r.kind) for r in result.refused] == [
        ("huge-1", PolicyRefusal.CPUS_EXHAUSTED)]
    assert sum(g.vcpus for g in result.groups) == 4 * 8 + 3 * 4
    node0 = result.nodes[0]
    assert (node0.cpus, node0.slots, node0.memory_capacity_mib) == (64, 64, 393216)
    assert sum(n.memory_mib for n in result.nodes) == 4 * 65536 + 3 * 16384


def test_each_arrival_sees_the_ones_before_it() -> None:
    arrivals = [Arrival(VmRequest(f"vm-{i}", 4, 1024, Profile.COMPACT)) for i in range(5)]
    result = place_fleet(TOPO_OPTERON_16, arrivals)
    assert [p.nodes for p in result.placed] == [(0,), (1,), (2,), (3,)]
    assert [r.request.name for r in result.refused] == ["vm-4"]
    # the same function, one at a time, gives the same answer (density builds on it)
    alone = place_vm(TOPO_OPTERON_16, arrivals[0].request)
    assert result.placed[0] == alone
    more = place_fleet(TOPO_OPTERON_16, arrivals, PlaceOptions(cpu_overcommit=2.0))
    assert not more.refused


def test_compact_with_overcommit_fills_free_cpus_before_stacking_a_group() -> None:
    # 48 two-vCPU VMs on epyc-2s at 4 vCPUs per CPU: the closest fit by slots would pile
    # them into the first groups (32 slots each) while the others idle; the density
    # experiment measured latency tenants at 80x their SLO so. No group gets more vCPUs
    # than CPUs while another has CPUs to spare
    arrivals = [Arrival(VmRequest(f"web-{i}", 2, 1024, Profile.COMPACT)) for i in range(48)]
    result = place_fleet(TOPO_EPYC_2S, arrivals, PlaceOptions(cpu_overcommit=4.0))
    assert not result.refused
    assert max(g.vcpus for g in result.groups) <= 8
    assert sum(g.vcpus for g in result.groups) == 96


@pytest.mark.parametrize(("text", "message"), [
    ('[[vm]]\nvcpus = 2\n', "'flavor' must be a non-empty string"),
    ('[[vm]]\nflavor = "a"\n', "'vcpus' is required"),
    ('[[vm]]\nflavor = "a"\nvcpus = 0\n', "'vcpus' must be a whole number within 1..4096"),
    ('[[vm]]\nflavor = "a"\nvcpus = 2\nprofile = "tight"\n', "profile must be compact"),
    ('[[vm]]\nflavor = "a"\nvcpus = 2\ncpus = 2\n', "unknown key 'cpus'"),
    ('[[vm]]\nflavor = "a"\nvcpus = 2\ncache_weight = -1\n', "'cache_weight' must be"),
    ('[[host]]\nflavor = "a"\n', "unknown table 'host'"),
    ('{"flavor": "a", "vcpus": 2}\n{broken\n', "f:2: not a JSON object"),
    ('vm = 3\n', "'vm' must be an array of tables"),
    ('[[vm]]\nflavor = "a"\nvcpus = 2\ncount = 200000\n', "'count' must be a whole number"),
])
def test_a_bad_arrival_is_one_error_naming_it(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_arrivals(text, "f")


def test_until_refused_stops_at_the_first_refusal_and_bounds_every_prefix() -> None:
    arrivals = [Arrival(VmRequest(f"vm-{i}", 4, 1024, Profile.COMPACT)) for i in range(6)]
    arrivals.insert(2, Arrival(VmRequest("huge-1", 64, 1024, Profile.COMPACT)))
    whole = place_fleet(TOPO_OPTERON_16, arrivals)
    stopped = place_fleet(TOPO_OPTERON_16, arrivals, until_refused=True)
    assert [r.request.name for r in whole.refused] == ["huge-1", "vm-4", "vm-5"]
    assert [r.request.name for r in stopped.refused] == ["huge-1"]
    assert stopped.placed == whole.placed[:2]
    # every prefix up to the first refusal is placed whole, and none past it
    for n in range(len(arrivals) + 1):
        assert bool(place_fleet(TOPO_OPTERON_16, arrivals[:n]).refused) == (n > 2)


def test_host_room_weighs_unobserved_vcpus_as_flavor_weight_does() -> None:
    # host_room works each flavor's weight out once; names shared across flavors (which
    # make flavor_weight also count the other flavor's VMs) take the exact path
    vms = (
        PlacedVm("a-1", "a", (frozenset({0}), frozenset({1})), (2.0, None)),
        PlacedVm("a-2", "a", (frozenset({2}),), (None,)),
        PlacedVm("b-1", "b", (frozenset({3}),), (0.5,)),
        PlacedVm("shared", "a", (frozenset({4}),), (3.0,)),
        PlacedVm("shared", "b", (frozenset({5}),), (None,)),
        PlacedVm("c-1", "", (frozenset({6}),), ()),
    )
    room = host_room(TOPO_OPTERON_16, Unify.L2, vms, PlaceOptions())
    unit_of = {cpu: u.id for u in TOPO_OPTERON_16.units(Unify.L2) for cpu in u.cpus}
    host = (2.0 + 0.5 + 3.0) / 3
    for vm in vms:
        mine = flavor_weight(vms, VmRequest(vm.name, 1, flavor=vm.flavor))
        for index, covered in enumerate(vm.vcpu_units):
            weight = vm.weights[index] if index < len(vm.weights) else None
            expected = weight if weight is not None else (host if mine is None else mine)
            (cpu,) = covered
            assert room.load[unit_of[cpu]] == expected
