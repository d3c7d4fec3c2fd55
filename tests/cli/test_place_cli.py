"""``unicache place``: the issue's acceptance on the models, refusals, fleets and config."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from unicache.topology.toml import load_model

ROOT = Path(__file__).resolve().parents[2]
UNICACHE = str(ROOT / ".venv/bin/unicache")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UNICACHE, "place", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def place_json(*args: str) -> dict[str, Any]:
    out = run(*args, "--json")
    assert out.returncode == 0, out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def guest_topology(data: dict[str, Any]) -> dict[str, int]:
    """The fragment's <cpu><topology> (the XML, not the JSON's copy of it)."""
    root = ET.fromstring(f"<domain>{data['libvirt_xml']}</domain>")
    topo = root.find("./cpu/topology")
    assert topo is not None
    return {k: int(v) for k, v in topo.attrib.items()}


@pytest.mark.parametrize(("profile", "ccxs"), [("compact", 1), ("spread", 8)])
def test_acceptance_8_vcpus_64_gib_on_epyc_2s(profile: str, ccxs: int) -> None:
    data = place_json("--vcpus", "8", "--memory", "65536", "--model", "epyc-2s",
                      "--profile", profile)
    topo = load_model("epyc-2s")
    node = data["node"]
    node_cpus = next(n.cpus for n in topo.nodes if n.id == node)
    # all vCPUs and the memory on one node
    assert data["nodes"] == [node] and [c["memory_mib"] for c in data["cells"]] == [65536]
    cpus = [topo.cpu(int(v["cpus"].split("-")[0])) for v in data["vcpus"]]
    assert {c.node for c in cpus} == {node} and all(c.cpu in node_cpus for c in cpus)
    assert f"<memory mode='strict' nodeset='{node}'/>" in data["libvirt_xml"]
    # one CCX (compact) or every CCX of the node (spread)
    units = {v["unit"] for v in data["vcpus"]}
    assert len(units) == ccxs
    # the fragment's topology: one die per CCX the vCPUs use, the vCPUs of a die on it
    grid = guest_topology(data)
    assert grid == {"sockets": 1, "dies": ccxs, "cores": 8 // ccxs, "threads": 1}
    for die in data["dies"]:
        first = die["die"] * grid["cores"]
        assert die["vcpus"] == (f"{first}" if grid["cores"] == 1 else
                                f"{first}-{first + grid['cores'] - 1}")


def test_acceptance_default_profile_is_auto_and_compact_without_weights() -> None:
    data = place_json("--vcpus", "8", "--memory", "65536", "--model", "epyc-2s")
    assert data["profile"] == "compact" and data["requested_profile"] is None
    assert "auto: no observed cache weights" in data["reasons"][1]


@pytest.mark.parametrize(("memory", "cells"), [(65536, 1), (524288, 2)])
def test_a_48_vcpu_vm_gets_one_cell_per_socket_when_a_socket_cannot_hold_it(
    memory: int, cells: int
) -> None:
    data = place_json("--vcpus", "48", "--memory", str(memory), "--model", "epyc-2s")
    assert len(data["cells"]) == cells
    assert [c["node"] for c in data["cells"]] == list(range(cells))
    assert guest_topology(data)["sockets"] == cells
    if cells == 2:
        xml = data["libvirt_xml"]
        assert "<memnode cellid='1' mode='strict' nodeset='1'/>" in xml
        assert "<cell id='1' cpus='24-47' memory='262144' unit='MiB'/>" in xml


def test_a_vm_that_does_not_fit_is_one_line_and_exit_2() -> None:
    out = run("--vcpus", "200", "--model", "epyc-2s")
    assert out.returncode == 2
    assert out.stderr == (
        "unicache: error: cannot place new-vm (200 vCPUs, 0 MiB): the host has 128 vCPU "
        "slots and 786432 MiB free (128 CPUs on 2 nodes)\n")
    assert out.stdout == ""


def test_the_config_place_table_sets_capacity(tmp_path: Path) -> None:
    cfg = tmp_path / "unicache.toml"
    cfg.write_text("[place]\nmemory_per_node_mib = 32768\n")
    data = place_json("--vcpus", "8", "--memory", "65536", "--model", "epyc-2s",
                      "--config", str(cfg))
    assert [c["memory_mib"] for c in data["cells"]] == [32768, 32768]  # two nodes
    cfg.write_text("[place]\nmemory_per_node_mib = 1\n")
    out = run("--vcpus", "1", "--memory", "4", "--model", "epyc-2s", "--config", str(cfg))
    assert out.returncode == 2 and "cannot place new-vm" in out.stderr


def test_arrivals_report_placements_refusals_and_loads(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_text("\n".join(json.dumps(a) for a in [
        {"flavor": "db", "vcpus": 8, "memory_mib": 65536, "count": 3},
        {"flavor": "big", "vcpus": 120, "memory_mib": 4096},
    ]) + "\n")
    data = place_json("--model", "epyc-2s", "--arrivals", str(fleet))
    assert [p["name"] for p in data["placed"]] == ["db-1", "db-2", "db-3"]
    assert [r["name"] for r in data["refused"]] == ["big-1"]
    assert sum(g["vcpus"] for g in data["groups"]) == 24
    assert [n["memory_mib"] for n in data["nodes"]] == [131072, 65536]
    text = run("--model", "epyc-2s", "--arrivals", str(fleet))
    assert text.returncode == 0, text.stderr
    assert "3 placed, 1 refused" in text.stdout and "CPUS_EXHAUSTED" in text.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--arrivals", "x.toml", "--vcpus", "2"), "--arrivals takes its VMs from the file"),
    (("--apply", "dom", "--connect", "none"), "--apply needs libvirt"),
    (("--apply", "dom", "--vcpus", "2"), "--apply DOMAIN places the domain as it is defined"),
    (("--vcpus", "0"), "--vcpus must be within 1..4096"),
    (("--arrivals", "/nonexistent.toml"), "cannot read arrivals /nonexistent.toml"),
])
def test_conflicting_options_are_one_line_and_exit_2(args: tuple[str, ...], message: str
                                                     ) -> None:
    out = run(*args)
    assert out.returncode == 2, out.stdout
    assert message in out.stderr and out.stderr.count("\n") == 1
