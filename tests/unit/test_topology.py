"""Topology: shipped models, TOML round trips, sysfs discovery, cache units."""

from __future__ import annotations

from pathlib import Path

import pytest
from unicache.errors import ConfigError, TopologyError
from unicache.topology import Inclusion, Scope, Unify
from unicache.topology.sysfs import discover_topology
from unicache.topology.toml import dump_toml, load_file, load_model, model_names, parse_toml

KIB = 1024
MIB = 1024 * 1024


def test_all_models_named_in_the_issue_ship() -> None:
    assert set(model_names()) >= {
        "opteron-16", "xeon-x5355", "core-i7-860", "opteron-242-2node", "xeon-5300-quad",
        "epyc-2s", "epyc-rome-2s", "xeon-spr-2s", "xeon-spr-2s-snc4",
    }


def test_opteron16_has_four_chips_of_four_cores_with_the_papers_caches() -> None:
    topo = load_model("opteron-16")
    groups = topo.llc_groups()
    assert [len(g.cpus) for g in groups] == [4, 4, 4, 4]
    sizes = {lv.level: lv.size_bytes for lv in topo.levels}
    assert sizes == {1: 64 * KIB, 2: 512 * KIB, 3: 2 * MIB}
    assert [lv.latency_cycles for lv in topo.levels] == [3, 14, 50]
    assert topo.levels[1].inclusion is Inclusion.EXCLUSIVE
    assert topo.levels[2].inclusion is Inclusion.VICTIM
    assert sum(n.controllers for n in topo.nodes) == 8
    # §4.5: 9.2 us at 2 GHz
    assert topo.migration_cycles == 18_400


@pytest.mark.parametrize(
    ("name", "groups", "cores_per_group", "nodes"),
    [
        ("xeon-x5355", 4, 2, 1),
        ("core-i7-860", 1, 8, 1),
        ("opteron-242-2node", 2, 1, 2),
        ("xeon-5300-quad", 2, 2, 1),
        ("epyc-2s", 16, 8, 2),
        ("epyc-rome-2s", 32, 4, 2),
        ("xeon-spr-2s", 2, 56, 2),
        ("xeon-spr-2s-snc4", 8, 14, 8),
    ],
    ids=lambda v: str(v),
)
def test_model_shape(name: str, groups: int, cores_per_group: int, nodes: int) -> None:
    topo = load_model(name)
    assert len(topo.llc_groups()) == groups
    assert {len(g.cpus) for g in topo.llc_groups()} == {cores_per_group}
    assert len(topo.nodes) == nodes


def test_xeon_x5355_has_64_colors_with_4k_pages() -> None:
    llc = load_model("xeon-x5355").llc
    # SRM §2.2: "there are 64 different cache colors on Intel Xeon 5355"
    assert llc.size_bytes // llc.ways // 4096 == 64


@pytest.mark.parametrize("name", model_names())
def test_models_round_trip_through_toml(name: str) -> None:
    topo = load_model(name)
    assert parse_toml(dump_toml(topo), origin="roundtrip") == topo


def test_opteron_units_add_exclusive_private_levels_to_the_victim_l3() -> None:
    topo = load_model("opteron-16")
    llc_units = topo.units(Unify.LLC)
    assert len(llc_units) == 4
    assert llc_units[0].capacity_bytes == 2 * MIB + 4 * (64 + 512) * KIB
    l2_units = topo.units(Unify.L2)
    assert len(l2_units) == 16
    assert {u.capacity_bytes for u in l2_units} == {(64 + 512) * KIB}


def _fake_sysfs(root: Path, groups: list[list[int]], l2_kib: int = 512) -> None:
    cpus = [c for g in groups for c in g]
    cpu_root = root / "devices/system/cpu"
    cpu_root.mkdir(parents=True)
    (cpu_root / "online").write_text(f"0-{max(cpus)}\n")
    for group in groups:
        for cpu in group:
            base = cpu_root / f"cpu{cpu}"
            (base / "topology").mkdir(parents=True)
            (base / "topology/physical_package_id").write_text("0\n")
            (base / "topology/thread_siblings_list").write_text(f"{cpu}\n")
            caches = [
                (1, "Data", "32K", 8, str(cpu)),
                (1, "Instruction", "32K", 8, str(cpu)),
                (2, "Unified", f"{l2_kib}K", 8, str(cpu)),
                (3, "Unified", "16384K", 16, f"{group[0]}-{group[-1]}"),
            ]
            for i, (level, kind, size, ways, shared) in enumerate(caches):
                idx = base / f"cache/index{i}"
                idx.mkdir(parents=True)
                for name, value in (
                    ("level", level), ("type", kind), ("size", size),
                    ("ways_of_associativity", ways), ("coherency_line_size", 64),
                    ("shared_cpu_list", shared),
                ):
                    (idx / name).write_text(f"{value}\n")
    node = root / "devices/system/node/node0"
    node.mkdir(parents=True)
    (node / "cpulist").write_text(f"0-{max(cpus)}\n")
    (node / "distance").write_text("10\n")
    (node / "meminfo").write_text("Node 0 MemTotal:       1048576 kB\n")


def test_discovery_finds_llc_groups_and_private_levels_in_a_sysfs_tree(tmp_path: Path) -> None:
    _fake_sysfs(tmp_path, [[0, 1, 2, 3], [4, 5, 6, 7]])
    topo = discover_topology(tmp_path)
    assert [sorted(g.cpus) for g in topo.llc_groups()] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [lv.level for lv in topo.levels] == [1, 2, 3]  # instruction cache left out
    assert topo.levels[1].scope is Scope.CORE
    assert topo.llc.scope is Scope.LLC_GROUP
    assert topo.llc.sets == 16 * MIB // 16 // 64
    assert topo.nodes[0].memory_bytes == 1024 * MIB
    assert topo.migration_cycles is None  # not in sysfs: never invented
    assert all(lv.latency_cycles is None for lv in topo.levels)


def test_discovery_of_this_machine_matches_sysfs() -> None:
    topo = discover_topology()
    cpu_root = Path("/sys/devices/system/cpu")
    online = (cpu_root / "online").read_text().strip()
    assert topo.cpus[-1].cpu + 1 == len(topo.cpus) or online
    for group in topo.llc_groups():
        first = min(group.cpus)
        indices = sorted((cpu_root / f"cpu{first}/cache").glob("index*"))
        shared = (indices[-1] / "shared_cpu_list").read_text().strip()
        from unicache.cpulist import parse_list

        assert parse_list(shared) == group.cpus


def test_discovery_without_cache_description_is_a_topology_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError):
        discover_topology(tmp_path)


def test_unknown_model_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="opteron-16"):
        load_model("pentium-4")


@pytest.mark.parametrize(
    "text",
    [
        "not toml [",
        "name = 'x'\n",
        "name='x'\n[[levels]]\nlevel=1\nsize_kib=3\nways=8\nscope='core'\n",
    ],
    ids=["syntax", "missing-sections", "bad-geometry"],
)
def test_bad_model_file_is_one_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        load_file(path)


def test_the_mfc_opteron_reads_other_chips_clean_lines_from_dram() -> None:
    # MOESI without a clean forwarder (MFC §6.3: 16 Linux readers of 8 MiB exceed DRAM)
    assert not load_model("opteron-16").forwards_clean_lines
    assert load_model("epyc-2s").forwards_clean_lines


def test_a_model_whose_forwards_clean_lines_is_not_a_boolean_is_a_config_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("forwards_clean_lines = 'no'\n" + dump_toml(load_model("xeon-5300-quad")))
    with pytest.raises(ConfigError, match="forwards_clean_lines must be true or false"):
        load_file(path)
