"""The modern machine models: shapes as described, sources stated, derived costs as documented."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from unicache.topology import Inclusion, Scope, Topology, Unify
from unicache.topology.toml import load_model, model_names

from tests.topologies import TOPO_XEON_SPR_2S, TOPO_XEON_SPR_2S_SNC4

KIB = 1024
MIB = 1024 * KIB

#: docs/simulator.md "Migration cost": hop, lines refilled, memory-level parallelism
HOP_NS = 8400.0
REFILL_LINES = 64
MLP = 2


@dataclass(frozen=True)
class Shape:
    """What a model's description promises."""

    sockets: int
    cores_per_socket: int
    groups_per_socket: int
    nodes_per_socket: int
    l2_kib: int
    llc_kib: int


SHAPES = {
    # 8 CCD of one 8-core CCX per socket, 32 MiB L3 per CCX, 1 MiB L2
    "epyc-2s": Shape(2, 64, 8, 1, 1024, 32 * 1024),
    # 8 CCD of two 4-core CCX per socket, 16 MiB L3 per CCX, 512 KiB L2
    "epyc-rome-2s": Shape(2, 64, 16, 1, 512, 16 * 1024),
    # one mesh LLC per socket, 56 x 1.875 MiB, 2 MiB L2
    "xeon-spr-2s": Shape(2, 56, 1, 1, 2048, 105 * 1024),
    # SNC4: a quadrant of 14 cores is a node and an LLC domain of 26.25 MiB
    "xeon-spr-2s-snc4": Shape(2, 56, 4, 4, 2048, 26880),
}

#: same-LLC-group core-to-core latency (ns) of each model, from its source
SAME_GROUP_C2C_NS = {
    "epyc-2s": 27.1,
    "epyc-rome-2s": 25.0,
    "xeon-spr-2s": 55.3,
    "xeon-spr-2s-snc4": 41.8,
}


def _sockets(topo: Topology) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for c in topo.cpus:
        out.setdefault(c.socket, []).append(c.cpu)
    return out


@pytest.mark.parametrize("name", model_names())
def test_every_model_states_where_its_figures_come_from(name: str) -> None:
    topo = load_model(name)
    assert topo.source.strip() and topo.description.strip()


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_llc_groups_and_nodes_match_the_description(name: str) -> None:
    topo, shape = load_model(name), SHAPES[name]
    sockets = _sockets(topo)
    assert len(sockets) == shape.sockets
    assert {len(cpus) for cpus in sockets.values()} == {shape.cores_per_socket}
    for socket in sockets:
        groups = [g for g in topo.llc_groups() if g.socket == socket]
        assert len(groups) == shape.groups_per_socket
        nodes = {g.node for g in groups}
        assert len(nodes) == shape.nodes_per_socket
    assert len(topo.nodes) == shape.sockets * shape.nodes_per_socket
    sizes = {lv.level: lv.size_bytes // KIB for lv in topo.levels}
    assert sizes[2] == shape.l2_kib and sizes[3] == shape.llc_kib
    assert topo.levels[1].scope is Scope.CORE and topo.llc.scope is Scope.LLC_GROUP


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_llc_group_lies_in_one_node_and_one_socket(name: str) -> None:
    topo = load_model(name)
    for group in topo.llc_groups():
        assert {topo.cpu(c).node for c in group.cpus} == {group.node}
        assert {topo.cpu(c).socket for c in group.cpus} == {group.socket}


def test_snc4_has_four_nodes_and_four_llc_domains_per_socket() -> None:
    snc, flat = TOPO_XEON_SPR_2S_SNC4, TOPO_XEON_SPR_2S
    per_socket: dict[int, set[int]] = {}
    for node in snc.nodes:
        (socket,) = {snc.cpu(c).socket for c in node.cpus}
        per_socket.setdefault(socket, set()).add(node.id)
    assert [len(v) for v in per_socket.values()] == [4, 4]
    # the same machine: the LLC, channels and memory are quartered, not changed
    assert snc.llc.size_bytes * 4 == flat.llc.size_bytes
    assert sum(n.controllers for n in snc.nodes) == sum(n.controllers for n in flat.nodes)
    assert sum(n.memory_bytes for n in snc.nodes) == sum(n.memory_bytes for n in flat.nodes)
    snc_bw = sum(n.dram_bandwidth_bytes_per_cycle or 0 for n in snc.nodes)
    flat_bw = sum(n.dram_bandwidth_bytes_per_cycle or 0 for n in flat.nodes)
    assert snc_bw == pytest.approx(flat_bw, rel=0.01)
    # quadrant-local memory is closer than the socket-wide average
    snc_lat, flat_lat = snc.nodes[0].dram_latency_cycles, flat.nodes[0].dram_latency_cycles
    assert snc_lat is not None and flat_lat is not None and snc_lat < flat_lat


def test_zen_l3s_are_victim_caches_of_their_ccx() -> None:
    for name in ("epyc-2s", "epyc-rome-2s"):
        topo = load_model(name)
        assert topo.llc.inclusion is Inclusion.VICTIM
        unit = topo.units(Unify.LLC)[0]
        cores = len(topo.llc_groups()[0].cpus)
        assert unit.capacity_bytes == topo.llc.size_bytes + cores * topo.private_bytes()


@pytest.mark.parametrize("name", sorted(SAME_GROUP_C2C_NS))
def test_migration_cost_is_the_hop_plus_the_refill_at_core_to_core_latency(name: str) -> None:
    topo = load_model(name)
    assert topo.clock_ghz is not None
    refill_ns = REFILL_LINES * SAME_GROUP_C2C_NS[name] / MLP
    assert topo.migration_cycles == round((HOP_NS + refill_ns) * topo.clock_ghz)
    # moving to another LLC group refills from farther away
    assert topo.migration_cycles_remote is not None
    assert topo.migration_cycles_remote > topo.migration_cycles


def test_the_derivation_reproduces_the_mfc_papers_opteron_figures() -> None:
    # §4.5: 9.2 us within a chip, 10.5-11.7 us across chips (2 GHz Opteron); the refill is
    # from the L3 (50 cycles = 25 ns) or another chip (200 cycles = 100 ns)
    assert pytest.approx(9200.0) == HOP_NS + REFILL_LINES * 25.0 / MLP
    assert 10_500 <= HOP_NS + REFILL_LINES * 100.0 / MLP <= 11_700


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_remote_costs_exceed_local_ones(name: str) -> None:
    topo = load_model(name)
    local = topo.nodes[0].dram_latency_cycles
    assert local is not None and topo.remote_latency_cycles is not None
    assert topo.remote_latency_cycles > local
    assert topo.cross_chip_cache_latency_cycles is not None
    assert topo.cross_chip_cache_latency_cycles > (topo.llc.latency_cycles or 0)
    # one core reads DRAM slower than its node's channels deliver
    for node in topo.nodes:
        assert node.core_dram_bandwidth_bytes_per_cycle is not None
        assert node.dram_bandwidth_bytes_per_cycle is not None
        assert node.core_dram_bandwidth_bytes_per_cycle < node.dram_bandwidth_bytes_per_cycle
