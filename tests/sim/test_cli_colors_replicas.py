"""unicache-sim srm and ncc: JSON output, the effects, one-line errors, the plots."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from typer.testing import CliRunner
from unicache_sim.cli.main import app

# click < 8.2 mixes stderr into stdout unless told not to; 8.2 always separates them
if "mix_stderr" in inspect.signature(CliRunner).parameters:
    runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg,unused-ignore]
else:
    runner = CliRunner()

PNG = b"\x89PNG\r\n\x1a\n"


def test_srm_json_reports_both_configurations_and_coloring_helps(tmp_path: Path) -> None:
    out = tmp_path / "fig2.png"
    result = runner.invoke(
        app,
        [
            "srm",
            "--model",
            "xeon-x5355",
            "--sizes-kb",
            "1536",
            "--tarball-mb",
            "16",
            "--json",
            "--plot",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["n_colors"] == 64
    point = doc["points"][0]
    assert point["size_kb"] == 1536
    assert set(point["without"]["runs"]) == {"alone", "apart", "shared"}
    assert point["with"]["slowdown_pct"] < point["without"]["slowdown_pct"] / 3
    assert point["with"]["misses_per_m_instr"] < point["without"]["misses_per_m_instr"]
    assert point["with"]["aside"] == ""  # colored: the step-aside predicted a gain
    assert out.read_bytes()[:8] == PNG


def test_ncc_json_reports_local_hits_and_times(tmp_path: Path) -> None:
    out = tmp_path / "ncc.png"
    result = runner.invoke(
        app,
        [
            "ncc",
            "--model",
            "opteron-242-2node",
            "--tree-mb",
            "4",
            "--greps",
            "8",
            "--json",
            "--plot",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["without"]["local_ratio"] < 0.55
    assert doc["with"]["local_ratio"] > 0.7
    assert doc["with"]["avg_grep_s"] < doc["without"]["avg_grep_s"]
    assert doc["spec"]["tree_mb"] == 4
    assert out.read_bytes()[:8] == PNG


def test_srm_table_output_names_both_configurations() -> None:
    result = runner.invoke(app, ["srm", "--sizes-kb", "256", "--tarball-mb", "8"])
    assert result.exit_code == 0, result.stderr
    assert "slow% SRM" in result.stdout
    assert "0.0 aside" in result.stdout  # 256 KiB: colors would cost mergesort, none are made
    assert "SRM leaves vm0's streams uncolored" in result.stdout


def _one_line_error(args: list[str], text: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert text in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_bad_inputs_are_one_line_errors() -> None:
    _one_line_error(["srm", "--sizes-kb", "256,big"], "--sizes-kb wants")
    _one_line_error(["srm", "--vm-pages", "striped"], "--vm-pages must be")
    _one_line_error(["srm", "--model", "opteron-242-2node"], "no CPU sharing the LLC")
    _one_line_error(["ncc", "--model", "xeon-x5355"], "one NUMA node")
    _one_line_error(["ncc", "--greps", "1"], "--greps must be at least --shells")
    _one_line_error(["ncc", "--model", "cray-1"], "no machine model")
