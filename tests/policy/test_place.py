"""VM placement on the named machines, table-driven as the Kubernetes CPU manager's tests.

Each table row is one machine of tests/topologies.py and one request; ``ids`` say what the
row shows. The rules are the module docstring's of unicache.policy.place.vm: node alignment,
compact vs spread, the fewest nodes for big VMs, capacity and refusal, no oscillation,
and a guest topology whose dies are the LLC groups the vCPUs sit in.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from unicache.errors import ConfigError, PolicyRefusal
from unicache.policy.place.options import MemoryMode, PlaceOptions, Profile, place_options_from
from unicache.policy.place.room import resolve_profile
from unicache.policy.place.types import (
    PlacedVm,
    Placement,
    VmRequest,
    flavor_of,
    placed_from,
    placement_from_dict,
    placement_to_dict,
)
from unicache.policy.place.vm import place_vm
from unicache.topology import Topology, Unify

from tests.topologies import (
    TOPO_CORE_I7_860,
    TOPO_EPYC_2S,
    TOPO_EPYC_ROME_2S,
    TOPO_HOST_2C,
    TOPO_OPTERON_16,
    TOPO_OPTERON_242_2NODE,
    TOPO_XEON_5300,
    TOPO_XEON_SPR_2S,
    TOPO_XEON_SPR_2S_SNC4,
    TOPO_XEON_X5355,
)

COMPACT, SPREAD, AUTO = Profile.COMPACT, Profile.SPREAD, Profile.AUTO
MACHINES = {
    "epyc-2s": TOPO_EPYC_2S, "epyc-rome-2s": TOPO_EPYC_ROME_2S, "xeon-spr-2s": TOPO_XEON_SPR_2S,
    "xeon-spr-2s-snc4": TOPO_XEON_SPR_2S_SNC4, "opteron-16": TOPO_OPTERON_16,
    "opteron-242-2node": TOPO_OPTERON_242_2NODE, "xeon-5300-quad": TOPO_XEON_5300,
    "xeon-x5355": TOPO_XEON_X5355, "core-i7-860": TOPO_CORE_I7_860, "host-2c": TOPO_HOST_2C,
}


def vm(name: str, vcpus: int, memory: int = 0, profile: Profile | None = COMPACT,
       flavor: str = "") -> VmRequest:
    return VmRequest(name, vcpus, memory, profile, flavor)


def check_invariants(topo: Topology, p: Placement, unify: Unify = Unify.LLC) -> None:
    """What every placement holds (rule 4: the guest grid is the placement)."""
    units = {u.id: u for u in topo.units(unify)}
    n, t = p.request.vcpus, p.topology
    assert len(p.vcpus) == t.max_vcpus >= n
    assert t.sockets == len(p.cells)
    per_cell = t.dies * t.cores
    dies = {(d.cell, d.die): d for d in p.dies}
    assert len({d.unit for d in p.dies}) == len(p.dies)  # one LLC group per die
    for pin in p.vcpus:
        cell, die = pin.vcpu // per_cell, pin.vcpu % per_cell // t.cores
        assert pin.online == (pin.vcpu < n)
        if pin.online:  # an online vCPU sits on its own die's LLC group
            assert dies[(cell, die)].unit == pin.unit and pin.vcpu in dies[(cell, die)].vcpus
        assert pin.cpus == units[pin.unit].cpus
        assert units[pin.unit].node == p.cells[cell].node
    for d in p.dies:  # a VM never puts more vCPUs on a group than it has CPUs
        assert 0 < len(d.vcpus) <= min(t.cores, len(units[d.unit].cpus))
    assert sum(len(d.vcpus) for d in p.dies) == n
    assert sum(c.memory_mib for c in p.cells) == p.request.memory_mib
    # offline slots only trail: every die but the cell's last ones is full
    assert sorted(v.vcpu for v in p.online()) == list(range(n))


# Section: rule 1, node alignment ----------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "vcpus", "memory"),
    [
        ("epyc-2s", 8, 65536),
        ("epyc-2s", 64, 393216),
        ("epyc-rome-2s", 8, 65536),
        ("xeon-spr-2s", 16, 131072),
        ("xeon-spr-2s-snc4", 14, 32768),
        ("opteron-16", 4, 2048),
        ("opteron-242-2node", 1, 512),
        ("xeon-x5355", 8, 2048),
        ("host-2c", 2, 1024),
    ],
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("profile", [COMPACT, SPREAD])
def test_a_vm_that_fits_one_node_stays_in_it(
    machine: str, vcpus: int, memory: int, profile: Profile
) -> None:
    topo = MACHINES[machine]
    p = place_vm(topo, vm("a", vcpus, memory, profile))
    check_invariants(topo, p)
    assert len(p.cells) == 1
    node = next(n for n in topo.nodes if n.id == p.nodes[0])
    assert frozenset().union(*(v.cpus for v in p.vcpus)) <= node.cpus
    assert p.emulator_cpus <= node.cpus  # the emulator stays with its memory
    assert p.cells[0].memory_mib == memory
    assert p.reasons[0].startswith(f"NUMA-aligned: node {node.id} holds all {vcpus} vCPUs")


# Section: rule 3, compact vs spread --------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "vcpus", "profile", "groups", "grid"),
    [
        # a CCX of 8: compact is one CCX, spread one vCPU on each of the node's 8 CCXs
        ("epyc-2s", 8, COMPACT, (0,), (1, 1, 8)),
        ("epyc-2s", 8, SPREAD, (0, 1, 2, 3, 4, 5, 6, 7), (1, 8, 1)),
        # 12 on CCXs of 8: a whole CCX and 4 on the next; 4 trailing slots offline
        ("epyc-2s", 12, COMPACT, (0, 1), (1, 2, 8)),
        ("epyc-2s", 12, SPREAD, (0, 1, 2, 3, 4, 5), (1, 6, 2)),
        # Rome's CCX of 4: compact takes two whole CCXs
        ("epyc-rome-2s", 8, COMPACT, (0, 1), (1, 2, 4)),
        ("epyc-rome-2s", 8, SPREAD, (0, 1, 2, 3, 4, 5, 6, 7), (1, 8, 1)),
        ("epyc-rome-2s", 32, SPREAD, tuple(range(16)), (1, 16, 2)),
        # one mesh LLC per socket: both profiles are the socket's one group
        ("xeon-spr-2s", 8, COMPACT, (0,), (1, 1, 8)),
        ("xeon-spr-2s", 8, SPREAD, (0,), (1, 1, 8)),
        # the papers' machines
        ("xeon-x5355", 4, COMPACT, (0, 1), (1, 2, 2)),
        ("xeon-x5355", 4, SPREAD, (0, 1, 2, 3), (1, 4, 1)),
        ("xeon-5300-quad", 2, COMPACT, (0,), (1, 1, 2)),
        ("xeon-5300-quad", 2, SPREAD, (0, 1), (1, 2, 1)),
        ("opteron-16", 4, COMPACT, (0,), (1, 1, 4)),
        ("core-i7-860", 4, SPREAD, (0,), (1, 1, 4)),
        ("host-2c", 2, SPREAD, (0,), (1, 1, 2)),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_compact_fills_whole_llc_groups_and_spread_takes_the_lightest(
    machine: str, vcpus: int, profile: Profile, groups: tuple[int, ...],
    grid: tuple[int, int, int],
) -> None:
    topo = MACHINES[machine]
    p = place_vm(topo, vm("a", vcpus, 1024, profile))
    check_invariants(topo, p)
    assert p.units == groups
    assert (p.topology.sockets, p.topology.dies, p.topology.cores) == grid
    assert p.profile is profile
    rule = "k8s uncore-cache alignment" if profile is COMPACT else "OBS-X"
    assert all(rule in d.reason for d in p.dies)


def test_unify_l2_makes_a_core_a_group_on_a_single_l3_host() -> None:
    # this machine has one L3: with --unify l2 each core is a group, and a 2-vCPU VM
    # gets a guest with two dies, one per core (what the libvirt guest test boots)
    for profile in (COMPACT, SPREAD):
        p = place_vm(TOPO_HOST_2C, vm("a", 2, 1024, profile), unify=Unify.L2)
        check_invariants(TOPO_HOST_2C, p, Unify.L2)
        assert [v.cpus for v in p.vcpus] == [frozenset({0}), frozenset({1})]
        assert (p.topology.dies, p.topology.cores) == (2, 1)
        assert p.emulator_cpus == frozenset({0, 1})


def test_compact_puts_a_small_vm_beside_another_in_the_closest_fit() -> None:
    # k8s: "take an uncore group with the exact amount of remaining cpus"; whole groups
    # stay free for VMs that need them
    first = place_vm(TOPO_EPYC_2S, vm("a", 4, 1024))
    second = place_vm(TOPO_EPYC_2S, vm("b", 4, 1024), [placed_from(first)])
    third = place_vm(TOPO_EPYC_2S, vm("c", 4, 1024), [placed_from(first), placed_from(second)])
    assert first.units == (0,)
    assert second.units == (8,)  # the lighter node first
    assert third.units == (0,)  # then the 4 free CPUs of CCX 0
    assert "closest fit (0 of 8 slots left" in third.dies[0].reason


def test_spread_avoids_the_llc_groups_heavy_vcpus_sit_in() -> None:
    # OBS-X: the new VM's vCPUs go to the groups with the smallest cache load
    heavy = PlacedVm("stream-1", "stream", tuple(frozenset({u}) for u in (0, 1, 2, 3)),
                     (3.0, 3.0, 3.0, 3.0), ((0, 4096.0),))
    light = PlacedVm("idle-1", "idle", tuple(frozenset({u}) for u in (4, 5)), (0.01, 0.01),
                     ((0, 4096.0),))
    p = place_vm(TOPO_EPYC_2S, vm("a", 4, 1024, SPREAD), [heavy, light])
    assert p.nodes == (1,)  # node 1 has no cache load at all
    memory = PlacedVm("mem-1", "mem", (), (), ((1, 16384.0),))  # fills node 1's memory
    p = place_vm(TOPO_EPYC_2S, vm("a", 4, 1024, SPREAD), [heavy, light, memory],
                 PlaceOptions(memory_per_node_mib=16384))
    assert p.nodes == (0,) and p.units == (4, 5, 6, 7)
    assert "lightest LLC group 6 of node 0 for 1 vCPU (cache load 0," in p.dies[2].reason


# Section: rule 2, the fewest nodes -------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "vcpus", "memory", "nodes", "grid"),
    [
        # 48 vCPUs fit one 64-core EPYC node: one cell
        ("epyc-2s", 48, 65536, (0,), (1, 6, 8)),
        # ... and get two cells, one per socket, when their memory does not fit one node
        ("epyc-2s", 48, 524288, (0, 1), (2, 3, 8)),
        ("epyc-2s", 96, 65536, (0, 1), (2, 6, 8)),
        ("epyc-rome-2s", 100, 65536, (0, 1), (2, 13, 4)),
        ("xeon-spr-2s", 80, 65536, (0, 1), (2, 1, 40)),
        # SNC4: four 14-core nodes of one socket, not nodes of both sockets
        ("xeon-spr-2s-snc4", 48, 65536, (0, 1, 2, 3), (4, 1, 12)),
        ("opteron-16", 8, 2048, (0, 1), (2, 1, 4)),
        ("opteron-16", 16, 8192, (0, 1, 2, 3), (4, 1, 4)),
        ("opteron-242-2node", 2, 512, (0, 1), (2, 1, 1)),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_vm_larger_than_a_node_gets_the_fewest_nodes_one_cell_each(
    machine: str, vcpus: int, memory: int, nodes: tuple[int, ...], grid: tuple[int, int, int]
) -> None:
    topo = MACHINES[machine]
    p = place_vm(topo, vm("big", vcpus, memory))
    check_invariants(topo, p)
    assert p.nodes == nodes
    assert (p.topology.sockets, p.topology.dies, p.topology.cores) == grid
    assert [c.node for c in p.cells] == list(nodes)
    if len(nodes) > 1:
        assert p.reasons[0].startswith(f"no single node holds {vcpus} vCPUs")


def test_a_48_vcpu_vm_with_more_memory_than_a_socket_gets_one_cell_per_socket() -> None:
    p = place_vm(TOPO_EPYC_2S, vm("big", 48, 524288, SPREAD))
    sockets = {c.node: {TOPO_EPYC_2S.cpu(min(v.cpus)).socket for v in p.vcpus
                        if v.vcpu in c.vcpus} for c in p.cells}
    assert sockets == {0: {0}, 1: {1}}
    assert [c.memory_mib for c in p.cells] == [262144, 262144]
    assert [len(c.vcpus) for c in p.cells] == [24, 24]


def test_memory_follows_free_room_when_one_node_is_short() -> None:
    # node 0 has 100 GiB left: the cell there gets what fits, the other cell the rest
    taken = PlacedVm("old-1", "old", (), (), ((0, 393216.0 - 102400),))
    p = place_vm(TOPO_EPYC_2S, vm("big", 96, 450000), [taken])
    assert [(c.node, c.memory_mib) for c in p.cells] == [(0, 102400), (1, 347600)]
    assert [len(c.vcpus) for c in p.cells] == [48, 48]


# Section: rule 5, capacity ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "vcpus", "memory", "options", "kind"),
    [
        ("epyc-2s", 129, 0, PlaceOptions(), PolicyRefusal.CPUS_EXHAUSTED),
        ("epyc-2s", 8, 800000, PlaceOptions(), PolicyRefusal.MEMORY_EXHAUSTED),
        ("epyc-2s", 8, 65537, PlaceOptions(memory_per_node_mib=32768),
         PolicyRefusal.MEMORY_EXHAUSTED),
        ("host-2c", 3, 0, PlaceOptions(), PolicyRefusal.CPUS_EXHAUSTED),
        # overcommit is between VMs: one VM never has more vCPUs than the host has CPUs
        ("host-2c", 3, 0, PlaceOptions(cpu_overcommit=4.0), PolicyRefusal.CPUS_EXHAUSTED),
        ("host-2c", 1, 24576, PlaceOptions(memory_reserve_mib=1024),
         PolicyRefusal.MEMORY_EXHAUSTED),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_vm_that_does_not_fit_is_refused_with_one_line(
    machine: str, vcpus: int, memory: int, options: PlaceOptions, kind: str
) -> None:
    with pytest.raises(PolicyRefusal) as err:
        place_vm(MACHINES[machine], vm("x", vcpus, memory), (), options)
    assert err.value.kind == kind
    assert "\n" not in str(err.value) and str(err.value).startswith("cannot place x")


def test_a_full_host_refuses_and_overcommit_makes_room() -> None:
    placed: list[PlacedVm] = []
    for i in range(16):  # 16 x 8 vCPUs fill both sockets' 16 CCXs
        placed.append(placed_from(place_vm(TOPO_EPYC_2S, vm(f"db-{i}", 8, 1024), placed)))
    assert sorted(u for p in placed if p.placement for u in p.placement.units) == list(range(16))
    with pytest.raises(PolicyRefusal) as err:
        place_vm(TOPO_EPYC_2S, vm("one-more", 1, 1024), placed)
    assert err.value.kind == PolicyRefusal.CPUS_EXHAUSTED
    assert "the host has 0 vCPU slots" in str(err.value)
    doubled = place_vm(TOPO_EPYC_2S, vm("one-more", 8, 1024), placed,
                       PlaceOptions(cpu_overcommit=2.0))
    check_invariants(TOPO_EPYC_2S, doubled)
    assert doubled.units == (0,) and "closest fit" in doubled.dies[0].reason


def test_unpinned_vcpus_count_a_share_on_every_group_they_may_run_on() -> None:
    # a domain without pins, 2 vCPUs anywhere on host-2c with --unify l2 (2 groups of 1)
    floating = PlacedVm("other", "other", (frozenset({0, 1}), frozenset({0, 1})))
    with pytest.raises(PolicyRefusal):
        place_vm(TOPO_HOST_2C, vm("a", 1), [floating], unify=Unify.L2)
    p = place_vm(TOPO_HOST_2C, vm("a", 2), [floating], PlaceOptions(cpu_overcommit=2.0),
                 Unify.L2)
    assert p.units == (0, 1)


# Section: rule 6, no oscillation ---------------------------------------------------------


@pytest.mark.parametrize("machine", ["epyc-2s", "epyc-rome-2s", "xeon-spr-2s-snc4",
                                     "opteron-16", "host-2c"])
@pytest.mark.parametrize("profile", [COMPACT, SPREAD, AUTO])
def test_the_same_vm_placed_twice_keeps_its_placement(machine: str, profile: Profile) -> None:
    topo = MACHINES[machine]
    size = max(1, len(topo.cpus) // 4)
    others = [placed_from(place_vm(topo, vm("other-1", size, 512, SPREAD)), 2.0)]
    first = place_vm(topo, vm("a", size, 1024, profile), others)
    on_host = [*others, placed_from(first, 0.5)]
    again = place_vm(topo, vm("a", size, 1024, profile), on_host)
    assert (again.vcpus, again.cells, again.emulator_cpus) == (
        first.vcpus, first.cells, first.emulator_cpus)
    assert again.reasons[0].endswith("kept (no oscillation)")
    thrice = place_vm(topo, vm("a", size, 1024, profile), [*others, placed_from(again, 0.5)])
    assert thrice == again  # the reasons do not pile up either
    # its own load never pushes it: without the record (a VM the daemon only observed)
    # it is placed where it was, as its load is left out
    observed = [*others, replace(placed_from(first, 0.5), placement=None)]
    assert place_vm(topo, vm("a", size, 1024, profile), observed).vcpus == first.vcpus


def test_a_vm_placed_again_with_another_size_is_placed_anew() -> None:
    first = place_vm(TOPO_EPYC_2S, vm("a", 8, 1024))
    bigger = place_vm(TOPO_EPYC_2S, vm("a", 16, 1024), [placed_from(first)])
    assert bigger.units == (0, 1)  # its old 8 vCPUs do not count against it


# Section: auto --------------------------------------------------------------------------


def test_auto_spreads_a_flavor_observed_above_the_hosts_average() -> None:
    heavy = PlacedVm("stream-1", "stream", (frozenset({0}),) * 4, (2.0,) * 4)
    light = PlacedVm("web-1", "web", (frozenset({8}),) * 4, (0.1,) * 4)
    p = place_vm(TOPO_EPYC_2S, vm("stream-2", 4, 1024, AUTO), [heavy, light])
    assert p.profile is SPREAD and "above the host's" in p.reasons[1]
    p = place_vm(TOPO_EPYC_2S, vm("web-2", 4, 1024, AUTO), [heavy, light])
    assert p.profile is COMPACT and "not above" in p.reasons[1]


@pytest.mark.parametrize("default", [COMPACT, SPREAD])
def test_auto_without_observed_weights_takes_the_configured_default(default: Profile) -> None:
    options = PlaceOptions(auto_default=default)
    profile, reason = resolve_profile(vm("new-1", 4, 0, AUTO), (), options)
    assert profile is default and "no observed cache weights" in reason
    # a request without a profile takes the config's
    profile, reason = resolve_profile(vm("x", 4, 0, None), (), PlaceOptions(profile=SPREAD))
    assert (profile, reason) == (SPREAD, "profile spread (the configured default)")


def test_flavor_comes_from_the_name_without_its_index() -> None:
    assert [flavor_of(n) for n in ("web-3", "db_12", "cache", "7")] == [
        "web", "db", "cache", "7"]


# Section: values and options -------------------------------------------------------------


@pytest.mark.parametrize(("machine", "vcpus", "memory"), [
    ("epyc-2s", 12, 4096), ("epyc-2s", 96, 524288), ("host-2c", 2, 0)])
def test_a_placement_reads_back_from_its_dict(machine: str, vcpus: int, memory: int) -> None:
    p = place_vm(MACHINES[machine], vm("a", vcpus, memory, SPREAD))
    assert placement_from_dict(placement_to_dict(p)) == p


@pytest.mark.parametrize(("machine", "profile"), itertools.product(
    sorted(MACHINES), [COMPACT, SPREAD]))
def test_every_size_on_every_machine_is_a_regular_grid_or_a_refusal(
    machine: str, profile: Profile
) -> None:
    topo = MACHINES[machine]
    largest = max(len(n.cpus) for n in topo.nodes)
    for vcpus in range(1, len(topo.cpus) + 1):
        p = place_vm(topo, vm("a", vcpus, 0, profile))
        check_invariants(topo, p)
        assert (len(p.cells) == 1) == (vcpus <= largest)


def test_place_options_parse_with_bounds_and_name_an_unknown_option() -> None:
    options = place_options_from({"cpu_overcommit": 2, "memory_reserve_mib": 2048,
                                  "memory_mode": "restrictive", "profile": "spread"})
    assert options == PlaceOptions(2.0, 0, 2048, MemoryMode.RESTRICTIVE, SPREAD)
    for raw, message in [
        ({"cpu_overcommit": 0.5}, "cpu_overcommit must be within 1..16, not 0.5"),
        ({"cpu_overcommit": True}, "must be a number"),
        ({"memory_per_node_mib": 1.5}, "whole number"),
        ({"memory_mode": "preferred"}, "bad value"),
        ({"auto_default": "auto"}, "auto_default must be 'compact' or 'spread'"),
        ({"overcommit": 2}, "unknown option 'overcommit'"),
    ]:
        with pytest.raises(ConfigError, match=message):
            place_options_from(raw)
