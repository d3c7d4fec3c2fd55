"""The installed ``unicache`` command, run as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from unicache.cpulist import parse_list
from unicache.policy.scu.mfc_state import RULES

ROOT = Path(__file__).resolve().parents[2]
UNICACHE = str(Path(sys.executable).parent / "unicache")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UNICACHE, *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_topology_of_opteron16_shows_four_groups_of_four_with_papers_sizes() -> None:
    out = run("topology", "--model", "opteron-16", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [len(parse_list(g["cpus"])) for g in data["llc_groups"]] == [4, 4, 4, 4]
    assert [lv["size_bytes"] for lv in data["levels"]] == [64 * 1024, 512 * 1024, 2 << 20]


def test_topology_without_arguments_reports_what_sysfs_says() -> None:
    out = run("topology", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["source"].startswith("sysfs")
    online = parse_list(Path("/sys/devices/system/cpu/online").read_text())
    assert {c["cpu"] for c in data["cpus"]} == online
    llc_index = sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"))[-1]
    shared = parse_list((llc_index / "shared_cpu_list").read_text())
    assert parse_list(data["llc_groups"][0]["cpus"]) == shared
    assert all(lv["latency_cycles"] is None for lv in data["levels"])


def test_replay_of_uniform_trace_gives_pinning_and_placement_with_rule_reasons() -> None:
    out = run("replay", "--model", "opteron-16", "--trace", "examples/opteron16-uniform.jsonl",
              "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    kinds = {a["kind"] for a in data["actions"]}
    assert {"pin-vcpu", "publish-placement"} <= kinds
    for action in data["actions"]:
        if action["kind"] == "pin-vcpu":
            assert action["reason"].startswith(("OBS-X", "OBS-L"))
        if action["kind"] == "publish-placement":
            assert "fig2:" in action["reason"]
    assert all(d["rule"] in RULES for d in data["chunk_decisions"])


def test_replay_of_cachebuster_mix_rebalances() -> None:
    out = run("replay", "--trace", "examples/xeon5300-cachebuster-spinloop.jsonl", "--json")
    data = json.loads(out.stdout)
    assert data["model"] == "xeon-5300-quad"  # from the trace header
    assert any("rebalance" in a["reason"] for a in data["actions"])


def test_replay_of_colors_replicas_trace_colors_the_stream_and_replicates_the_hot_file(
    tmp_path: Path,
) -> None:
    out = run("replay", "--trace", "examples/opteron242-colors-replicas.jsonl", "--json")
    assert out.returncode == 0, out.stderr
    actions = json.loads(out.stdout)["actions"]
    colors = [a for a in actions if a["kind"] == "assign-color"]
    assert colors and {a["color_node"] for a in colors} == {2, 3}
    assert all(a["file"] == "bac0" and "same-file" in a["rule"] for a in colors)
    made = [(a["tick"], a["chunk"]) for a in actions if a["kind"] == "replicate"]
    dropped = [(a["tick"], a["chunk"]) for a in actions if a["kind"] == "drop-replica"]
    assert (0, 0) in made and (0, 1) in made
    assert dropped == [(4, 1), (6, 0), (6, 1)]  # the write, then the shim-less writer
    tables = [a for a in actions if a["kind"] == "publish-placement"]
    last = {(e["file"], e["chunk"]): e for e in tables[-1]["entries"]}
    assert last[("40", 0)]["replica_nodes"] == "1"
    assert last[("bac0", 30)]["color_node"] in (2, 3)
    # explain collects the same records from a decision log
    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(json.dumps(a) + "\n" for a in actions))
    why = run("explain", "web", "--log", str(log), "--json")
    assert why.returncode == 0, why.stderr
    found = json.loads(why.stdout)
    assert len(found["colors"]) == len(colors)
    assert [r["kind"] for r in found["replicas"]].count("drop-replica") == 3
    text = run("explain", "web", "--log", str(log))
    assert "replicas (NCC)" in text.stdout and "guest node" in text.stdout


def test_replay_reports_malformed_lines_and_goes_on(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    good = (ROOT / "examples/xeon5300-cachebuster-spinloop.jsonl").read_text().splitlines()
    trace.write_text("\n".join([*good[:3], "{oops", *good[3:]]) + "\n")
    out = run("replay", "--trace", str(trace), "--json")
    assert out.returncode == 0
    assert f"{trace}:4: skipped" in out.stderr
    assert json.loads(out.stdout)["skipped"][0]["line"] == 4


def test_unreadable_trace_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = run("replay", "--trace", str(tmp_path / "nope.jsonl"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "cannot read trace" in out.stderr and "Traceback" not in out.stderr


def test_unknown_model_is_one_line_and_exit_2() -> None:
    out = run("topology", "--model", "vax-11")
    assert out.returncode == 2
    assert "no machine model 'vax-11'" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("run", "--interval", "0"), "--interval must be within 0.05..3600, not 0"),
    (("run", "--interval", "5000"), "--interval must be within 0.05..3600, not 5000"),
    (("place", "--vcpus", "0"), "--vcpus must be within"),
    (("vm", "stop", "uctest-no-such-vm"), "no VM named uctest-no-such-vm"),
])
def test_out_of_range_values_are_one_line_and_exit_2_before_anything_runs(
    args: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    # an interval of 0 once started a daemon that spun on its own loop
    out = run(*args, "--state-dir", str(tmp_path)) if args[0] == "run" else run(*args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr and out.stderr.strip().count("\n") == 0
    assert not (tmp_path / "decisions.jsonl").exists()


@pytest.mark.parametrize(("args", "message"), [
    (("topology", "--unify", "l9"), "Invalid value for '--unify': 'l9' is not one of"),
    (("replay",), "Missing option '--trace'"),
    (("topology", "--no-such-flag"), "No such option: --no-such-flag"),
    (("no-such-command",), "No such command 'no-such-command'"),
], ids=["bad-value", "missing-option", "unknown-flag", "unknown-command"])
def test_a_usage_error_is_one_line_naming_the_help_and_exit_2(
    args: tuple[str, ...], message: str
) -> None:
    out = run(*args)
    assert out.returncode == 2
    assert out.stderr.startswith(f"unicache: error: {message}"), out.stderr
    assert out.stderr.rstrip().endswith("--help)") and out.stderr.strip().count("\n") == 0


def test_topology_save_writes_a_loadable_model(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    assert run("topology", "--save", str(path), "--json").returncode == 0
    again = run("topology", "--file", str(path), "--json")
    assert again.returncode == 0
    assert json.loads(again.stdout)["llc_groups"] == json.loads(run("topology", "--json").stdout)[
        "llc_groups"
    ]


def test_place_on_epyc_model_gives_one_node_and_xml() -> None:
    out = run("place", "--vcpus", "4", "--model", "epyc-2s", "--profile", "spread", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert len({v["unit"] for v in data["vcpus"]}) == 4  # OBS-X: four lightest CCXs
    assert data["node"] == 0 and data["nodes"] == [0]
    assert data["libvirt_xml"].startswith("<vcpu placement='static'>4</vcpu>\n<cputune>")


def test_place_on_this_host_works_against_sysfs(tmp_path: Path) -> None:
    out = run("place", "--vcpus", "2", "--unify", "l2", "--state-dir", str(tmp_path),
              "--connect", "none", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["machine"] == "host"
    assert {v["cpus"] for v in data["vcpus"]} == {"0", "1"}
    assert data["basis"] == "this host (no daemon status, no libvirt)"


def test_help_works_for_every_command() -> None:
    top = run("--help")
    assert top.returncode == 0, top.stderr
    commands = ["topology", "models", "replay", "run", "place", "status", "explain", "version",
                "attach", "install-hook", "remove-hook", "bench", "vm"]
    listed = [line.split()[1] for line in top.stdout.splitlines() if line.startswith("│ ")
              and len(line.split()) > 1 and not line.split()[1].startswith("-")]
    assert [c for c in listed if c in commands] == commands  # all of them, in this order
    for command in commands:
        out = run(command, "--help")
        assert out.returncode == 0 and "Usage" in out.stdout, (command, out.stderr)


def test_every_command_has_json() -> None:
    # README: "Every command has --help and --json"
    commands = [("topology",), ("models",), ("replay",), ("run",), ("place",), ("status",),
                ("explain",), ("version",), ("attach",), ("install-hook",), ("remove-hook",),
                ("bench", "shim"), ("vm", "start"), ("vm", "stop"), ("vm", "list"),
                ("vm", "exec")]
    for command in commands:
        out = run(*command, "--help")
        assert out.returncode == 0 and "--json" in out.stdout, command


def test_version_and_run_print_json(tmp_path: Path) -> None:
    assert json.loads(run("version", "--json").stdout)["version"]
    out = run("run", "--unify", "l2", "--interval", "0.1", "--rounds", "1", "--connect", "none",
              "--state-dir", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    echoed = [json.loads(line) for line in out.stdout.splitlines()]
    # every record, exactly as the decision log holds it
    assert echoed and echoed == [json.loads(line) for line in
                                 (tmp_path / "decisions.jsonl").read_text().splitlines()]


MODERN = ("epyc-2s", "epyc-rome-2s", "xeon-spr-2s", "xeon-spr-2s-snc4")


def test_models_lists_the_modern_machines_with_their_shapes() -> None:
    out = run("models", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    shapes = {(rows[m]["cpus"], rows[m]["llc_groups"], rows[m]["nodes"]) for m in MODERN}
    assert shapes == {(128, 16, 2), (128, 32, 2), (112, 2, 2), (112, 8, 8)}


def test_topology_shows_each_modern_model_with_its_source() -> None:
    for model in MODERN:
        out = run("topology", "--model", model, "--json")
        assert out.returncode == 0, (model, out.stderr)
        data = json.loads(out.stdout)
        assert data["name"] == model and data["source"]
        assert data["migration_cycles"] < data["migration_cycles_remote"]
