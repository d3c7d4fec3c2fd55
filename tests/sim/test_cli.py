"""The unicache-sim command: JSON output, one-line errors, the plot."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from typer.testing import CliRunner
from unicache_sim.cli import app

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
    assert result.exit_code == 1
    assert "--workload must be one of" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_unknown_model_is_one_line_and_exit_1() -> None:
    result = runner.invoke(app, ["mfc", "--model", "cray-1", "--ws-mb", "1"])
    assert result.exit_code == 1
    assert "no machine model" in result.stderr


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "fig3.png"
    result = runner.invoke(
        app, ["mfc", "--ws-mb", "1,2", "--workload", "wc", "--plot", str(out), "--json"]
    )
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_corunner_and_lag_runs_finish() -> None:
    result = runner.invoke(
        app, ["mfc", "--ws-mb", "2", "--corunner", "mergesort", "--lag-us", "500", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["spec"]["corunner"] == "mergesort"
