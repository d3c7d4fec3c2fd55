"""``unicache bench shim --json`` runs and prints the figures docs/PERFORMANCE.md records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from unicache.cli import bench
from unicache.cli.bench import app


def test_bench_shim_json_has_the_figures() -> None:
    res = CliRunner().invoke(app, ["shim", "--json", "--rounds", "1", "--seconds", "0.2"])
    assert res.exit_code == 0, res.output
    fig = json.loads(res.stdout)
    for key in ("with_mbps", "without_mbps", "ratio", "lookup_ns", "nt_mbps"):
        assert fig[key] > 0, key
    assert abs(fig["ratio"] - fig["with_runs"][0] / fig["without_runs"][0]) < 1e-3
    assert fig["lookup_ns"] < 10_000


def test_bench_shim_bad_option_is_one_line() -> None:
    res = CliRunner().invoke(app, ["shim", "--rounds", "0"])
    assert res.exit_code == 2
    assert res.output.strip().startswith("unicache bench shim: rounds >= 1")
    assert "Traceback" not in res.output


def test_bench_outside_a_checkout_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the benchmarks are not in the package: they are loaded from the checkout's tools/bench
    monkeypatch.setattr(bench, "BENCH_DIR", tmp_path)
    res = CliRunner().invoke(app, ["shim", "--rounds", "1"])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"unicache bench shim: {tmp_path / 'shim_bench.py'} not found: the benchmarks run "
        "from a source checkout"
    )
