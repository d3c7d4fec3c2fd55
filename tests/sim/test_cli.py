"""The unicache-sim command: JSON output, one-line errors, the plot."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from unicache.config import DaemonConfig
from unicache_sim.cli.main import app

# click < 8.2 mixes stderr into stdout unless told not to; 8.2 always separates them
if "mix_stderr" in inspect.signature(CliRunner).parameters:
    runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg,unused-ignore]
else:
    runner = CliRunner()


def test_mfc_json_has_every_baseline_and_the_ratios() -> None:
    result = runner.invoke(app, ["mfc", "--ws-mb", "1", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    point = doc["points"][0]
    assert set(point["baselines"]) == {"linux", "unicache", "oracle"}
    assert point["speedup"] > 0 and point["of_oracle"] > 0
    assert all(b["dram_per_byte"] >= 0 for b in point["baselines"].values())


def test_unknown_workload_is_one_line_and_exit_1() -> None:
    result = runner.invoke(app, ["mfc", "--workload", "sort", "--ws-mb", "1"])
    assert result.exit_code == 2
    assert "--workload must be one of" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_unknown_model_is_one_line_and_exit_1() -> None:
    result = runner.invoke(app, ["mfc", "--model", "cray-1", "--ws-mb", "1"])
    assert result.exit_code == 2
    assert "no machine model" in result.stderr


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "fig3.png"
    result = runner.invoke(
        app, ["mfc", "--ws-mb", "1,2", "--workload", "wc", "--plot", str(out), "--json"]
    )
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_corunner_runs_on_the_live_loop_with_the_daemons_round() -> None:
    result = runner.invoke(app, ["mfc", "--ws-mb", "2", "--corunner", "mergesort", "--json"])
    assert result.exit_code == 0, result.stderr
    spec = json.loads(result.stdout)["spec"]
    assert spec["corunner"] == "mergesort"
    assert spec["path"] == "live"
    assert spec["timing"]["round_s"] == DaemonConfig().interval_s


def test_whatif_and_parallel_setup_are_named_in_the_output() -> None:
    args = ["mfc", "--ws-mb", "2", "--path", "whatif", "--setup", "parallel", "--threads", "2"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["spec"]["path"], doc["spec"]["setup"]) == ("whatif", "parallel")
    # and Linux with unicache's reader count, so that the set-up's own effect is not
    # read as unicache's
    point = doc["points"][0]
    same = point["baselines"]["linux-same-readers"]
    assert point["same_readers_speedup"] == pytest.approx(
        point["baselines"]["unicache"]["mb_per_s"] / same["mb_per_s"]
    )
    assert same["reads"] > 0
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.stderr
    assert "same" in table.stdout


def test_unify_is_the_daemons_option_and_named_in_the_output() -> None:
    result = runner.invoke(app, ["mfc", "--ws-mb", "1", "--unify", "l2", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["spec"]["unify"] == "l2"


@pytest.mark.parametrize(
    "args",
    [["--path", "kernel"], ["--setup", "twice"], ["--round-ms", "1"], ["--unify", "l3"]],
    ids=str,
)
def test_bad_path_setup_or_round_is_one_line_and_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, ["mfc", "--ws-mb", "2", *args])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_bound_json_gives_both_bounds_against_linux_for_each_level() -> None:
    result = runner.invoke(app, ["bound", "--threads", "4", "--ws-mb", "2", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["linux"]["readers"] == 4 and doc["linux"]["gb_per_s"] > 0
    assert {b["unify"] for b in doc["bounds"]} == {"llc", "l2"}
    for b in doc["bounds"]:
        assert b["readers"] == 8  # the parallel set-up: twice Linux's
        assert 0 < b["queue_bound_x_linux"] < b["cpu_bound_x_linux"]


@pytest.mark.parametrize(
    "args", [["--unify", "core"], ["--setup", "serial"], ["--threads", "0"], ["--model", "vax"]]
)
def test_bad_bound_options_are_one_line_and_exit_2(args: list[str]) -> None:
    result = runner.invoke(app, ["bound", *args])
    assert result.exit_code == 2, result.stdout
    assert "error:" in result.stderr and "Traceback" not in result.stderr + result.stdout


def test_obs_json_gives_each_finding_with_its_seeds_and_the_plot(tmp_path: Path) -> None:
    png = tmp_path / "obs.png"
    result = runner.invoke(app, ["obs", "--scenario", "pairs", "--seeds", "1", "--json",
                                 "--plot", str(png)])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["model"] == "xeon-5300-quad" and doc["seeds"] == [1]
    speedup = next(f for f in doc["findings"] if f["quantity"].endswith("OBS over Linux"))
    assert speedup["paper"] and len(speedup["values"]) == 1 and speedup["median"] > 0
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["obs", "--scenario", "sort"], "--scenario: unknown"),
        (["obs", "--backend", "xen"], "--backend must be one of"),
        (["obs", "--seeds", "one"], "--seeds wants"),
        (["srm", "--case", "sweep"], "--case: unknown"),
        (["srm", "--case", "rescan", "--seeds", "3-1"], "--seeds names no seed"),
    ],
    ids=["scenario", "backend", "seeds", "case", "empty seeds"],
)
def test_bad_obs_and_srm_case_options_are_one_line_and_exit_2(args: list[str], text: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert text in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_srm_case_json_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "rescan.png"
    result = runner.invoke(app, ["srm", "--case", "rescan", "--seeds", "1,2", "--json",
                                 "--plot", str(png)])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["model"] == "xeon-x5355" and doc["seeds"] == [1, 2]
    assert {f["quantity"] for f in doc["findings"]} >= {"re-scan slowdown, product's SRM (%)"}
    assert png.read_bytes()[:4] == b"\x89PNG"
