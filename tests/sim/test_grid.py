"""unicache-sim grid: axes from the topology, the summary math, a tiny real run, user errors."""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import pytest
from typer.testing import CliRunner
from unicache.errors import ConfigError, UnicacheError
from unicache.topology.toml import load_model, model_names
from unicache_sim.cli import grid as cli_grid
from unicache_sim.cli.main import app
from unicache_sim.experiments.mfc.read import BaselineResult, PointResult
from unicache_sim.grid.report import (
    CONFIRM_SEEDS,
    THRESHOLD,
    confirmation_points,
    regressions,
    summarize_groups,
    summarize_points,
)
from unicache_sim.grid.sweep import (
    QUICK_MAX_CPUS,
    GridPoint,
    GridRequest,
    GridResult,
    build_axes,
    grid_points,
    model_axes,
    multi_llc_models,
    on_chip_bytes,
    spread,
    thread_counts,
    ws_series,
)

from tests.topologies import TOPO_EPYC_2S, TOPO_OPTERON_16, TOPO_OPTERON_242_2NODE, TOPO_XEON_5300

if "mix_stderr" in inspect.signature(CliRunner).parameters:
    runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg,unused-ignore]
else:
    runner = CliRunner()

MIB = 1024 * 1024


# --- axes -------------------------------------------------------------------------------


def test_discovery_picks_every_model_with_several_llc_groups_and_no_other() -> None:
    found = multi_llc_models()
    expected = tuple(n for n in model_names() if len(load_model(n).llc_groups()) > 1)
    assert found == expected
    assert "opteron-16" in found and "xeon-x5355" in found
    assert "core-i7-860" not in found  # one LLC: nothing to unify
    assert multi_llc_models(["core-i7-860", "opteron-16"]) == ("opteron-16",)


def test_on_chip_bytes_counts_every_instance_of_every_level() -> None:
    # opteron-16: 4 chips x (2 MiB L3 + 4 cores x (64 KiB L1 + 512 KiB L2))
    assert on_chip_bytes(TOPO_OPTERON_16) == 4 * (2 * MIB + 4 * (64 + 512) * 1024)


def test_working_sets_run_from_half_an_llc_to_twice_the_on_chip_cache() -> None:
    # half of a 2 MiB L3 up to 2 x 17 MiB, powers of two
    assert ws_series(TOPO_OPTERON_16) == (1, 2, 4, 8, 16, 32)
    assert ws_series(TOPO_OPTERON_242_2NODE) == (0.5, 1, 2, 4)
    for name in multi_llc_models():
        topo = load_model(name)
        series = ws_series(topo)
        hi = 2 * on_chip_bytes(topo) / MIB
        assert series[0] == topo.llc.size_bytes / 2 / MIB
        assert all(b == 2 * a for a, b in pairwise(series))
        assert series[-1] <= hi < 2 * series[-1]


def test_thread_counts_are_one_four_and_all_cores_within_the_model() -> None:
    assert thread_counts(TOPO_OPTERON_16) == (1, 4, 16)
    assert thread_counts(TOPO_XEON_5300) == (1, 4)
    assert thread_counts(TOPO_OPTERON_242_2NODE) == (1, 2)
    assert model_axes("opteron-16", ("all", "1")).threads == (1, 16)
    assert model_axes("opteron-242-2node", ("1", "4")).threads == (1,)


def test_ws_points_keep_both_ends() -> None:
    assert spread([1, 2, 4, 8, 16, 32], 3) == (1, 8, 32)
    assert spread([1, 2, 4, 8, 16, 32], 2) == (1, 32)
    assert spread([1, 2, 4], 1) == (2,)
    assert spread([1, 2], 5) == (1, 2)
    assert model_axes("opteron-16", ws_points=2).ws_mb == (1, 32)


def test_full_grid_defaults_and_point_count() -> None:
    axes = build_axes(GridRequest())
    assert tuple(m.model for m in axes.models) == multi_llc_models()
    assert axes.workloads == ("read", "grep", "wc", "md5sum")
    assert axes.dists == ("uniform", "zipf")
    assert axes.paths == ("live", "whatif")
    assert axes.seeds == (1, 2, 3, 4, 5)
    per_model = [len(m.threads) * len(m.ws_mb) for m in axes.models]
    assert len(grid_points(axes)) == sum(per_model) * 4 * 2 * 2 * 5


def test_quick_narrows_only_the_axes_not_given() -> None:
    axes = build_axes(GridRequest(quick=True))
    assert axes.models and all(m.cpus <= QUICK_MAX_CPUS for m in axes.models)
    assert axes.workloads == ("read",) and axes.seeds == (1, 2)
    assert all(len(m.ws_mb) == 3 and m.threads[0] == 1 for m in axes.models)
    given = build_axes(GridRequest(quick=True, models=("epyc-2s",), seeds=3, workloads=("wc",)))
    assert [m.model for m in given.models] == ["epyc-2s"]
    assert given.seeds == (1, 2, 3) and given.workloads == ("wc",)
    assert given.models[0].threads == (1, len(TOPO_EPYC_2S.cpus))


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (GridRequest(models=("cray-1",)), "no machine model 'cray-1'"),
        (GridRequest(models=("core-i7-860",)), "has one LLC group"),
        (GridRequest(workloads=("sort",)), "--workloads: unknown 'sort'"),
        (GridRequest(dists=("normal",)), "--dists: unknown"),
        (GridRequest(paths=("kernel",)), "--paths: unknown"),
        (GridRequest(seeds=0), "--seeds must be at least 1"),
        (GridRequest(ws_points=0), "--ws-points must be at least 1"),
        (GridRequest(threads=("many",)), "--threads wants integers or 'all'"),
        (GridRequest(threads=("100000",)), "no model has the CPUs"),
        (GridRequest(file_kib=2), "--file-kib must be within 4..1048576"),
        (GridRequest(read_kib=-1), "--read-kib must be within 0..1048576"),
        (GridRequest(unify="l3"), "--unify must be one of llc, l2"),
    ],
)
def test_bad_requests_name_the_problem(req: GridRequest, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_axes(req)


def test_scan_files_and_read_calls_reach_every_point() -> None:
    axes = build_axes(GridRequest(models=("epyc-rome-2s",), file_kib=16384, read_kib=128))
    points = grid_points(axes)
    assert {(p.file_bytes, p.read_bytes) for p in points} == {(16 << 20, 128 << 10)}
    default = grid_points(build_axes(GridRequest(models=("epyc-rome-2s",))))
    assert {(p.file_bytes, p.read_bytes) for p in default} == {(256 << 10, 0)}


def test_the_unification_level_reaches_every_point() -> None:
    axes = build_axes(GridRequest(models=("opteron-16",), unify="l2"))
    assert {p.unify for p in grid_points(axes)} == {"l2"}
    assert {p.unify for p in grid_points(build_axes(GridRequest(models=("opteron-16",))))} == {
        "llc"
    }


# --- summary math -----------------------------------------------------------------------


def _result(point: GridPoint, speedup: float) -> GridResult:
    def base(name: str, mb_per_s: float) -> BaselineResult:
        return BaselineResult(name, mb_per_s, 0.5, 0.0, 100, 0.1)

    outcome = PointResult(
        point.ws_mb,
        (base("linux", 100.0), base("unicache", 100.0 * speedup), base("oracle", 200.0)),
    )
    return GridResult(point, outcome)


def _results(table: Sequence[tuple[str, str, float, Sequence[float]]]) -> list[GridResult]:
    """(path, dist, ws, speedups per seed) -> results of opteron-16 read, 1 thread."""
    out = []
    for path, dist, ws, speedups in table:
        for seed, s in enumerate(speedups, start=1):
            out.append(_result(GridPoint("opteron-16", "read", dist, 1, path, ws, seed), s))
    return out


def test_point_speedup_is_the_median_over_seeds() -> None:
    results = _results([("live", "uniform", 8.0, [1.5, 0.5, 1.2, 3.0, 1.1])])
    (point,) = summarize_points(results)
    assert point.seeds == (1, 2, 3, 4, 5)
    assert point.speedups == pytest.approx((1.5, 0.5, 1.2, 3.0, 1.1))
    assert point.median == pytest.approx(1.2)
    assert point.of_oracle == pytest.approx(0.6)  # 1.2 x 100 / 200


def test_group_min_median_max_below_and_worst() -> None:
    results = _results(
        [
            ("live", "uniform", 1.0, [1.0, 0.97, 0.96]),  # median 0.97: below
            ("live", "uniform", 8.0, [2.0, 2.5, 1.5]),  # 2.0
            ("live", "zipf", 1.0, [0.99, 0.98, 1.0]),  # 0.99: not below
            ("live", "zipf", 8.0, [1.4, 0.5, 1.6]),  # 1.4 (one bad seed does not count)
            ("whatif", "uniform", 1.0, [0.9, 0.9, 0.95]),  # 0.9
        ]
    )
    points = summarize_points(results)
    live, whatif = summarize_groups(points)
    assert (live.model, live.workload, live.path, live.points) == ("opteron-16", "read", "live", 4)
    assert live.min == pytest.approx(0.97)
    assert live.median == pytest.approx((0.99 + 1.4) / 2)
    assert live.max == pytest.approx(2.0)
    assert live.below == 1
    assert live.worst.key.dist == "uniform" and live.worst.key.ws_mb == 1.0
    assert (whatif.points, whatif.below) == (1, 1)
    assert [p.median for p in regressions(points)] == pytest.approx([0.9, 0.97])
    assert THRESHOLD == 0.98


def test_check_exits_1_on_a_regression_and_0_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    speedup = {"value": 0.9}

    def fake_run(points: Sequence[GridPoint], *_: object) -> tuple[GridResult, ...]:
        return tuple(_result(p, speedup["value"]) for p in points)

    monkeypatch.setattr(cli_grid, "run_grid", fake_run)
    args = ["grid", "--models", "opteron-242-2node", "--workloads", "read", "--dists", "zipf"]
    args += ["--seeds", "1", "--ws-points", "1", "--out", str(tmp_path), "--check"]
    bad = runner.invoke(app, args)
    assert bad.exit_code == 1, bad.stderr
    assert "below 0.98x" in bad.stdout
    speedup["value"] = 1.0
    good = runner.invoke(app, args)
    assert good.exit_code == 0, good.stderr


def test_only_a_point_below_the_threshold_is_confirmed_over_more_seeds() -> None:
    results = _results(
        [
            ("live", "zipf", 8.0, [0.969, 0.973]),  # below over 2 seeds: to 12
            ("live", "zipf", 1.0, [0.99, 1.0]),  # above: not rerun
            ("live", "uniform", 8.0, [0.95, 0.96, 0.97, 0.96, 1.0]),  # below over 5: to 12
        ]
    )
    extra = confirmation_points(results)
    assert [(p.dist, p.ws_mb, p.seed) for p in extra] == [
        *(("zipf", 8.0, s) for s in range(3, CONFIRM_SEEDS + 1)),
        *(("uniform", 8.0, s) for s in range(6, CONFIRM_SEEDS + 1)),
    ]
    # the rest of each point is kept: the same model, workload, threads and path
    assert {(p.model, p.workload, p.threads, p.path) for p in extra} == {
        ("opteron-16", "read", 1, "live")
    }
    # a point that already has every seed is judged as it is
    full = _results([("live", "zipf", 8.0, [0.9] * CONFIRM_SEEDS)])
    assert confirmation_points(full) == ()


def test_check_judges_a_point_below_over_its_seeds_by_the_confirming_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # seeds 1-2 below (0.97), seeds 3-12 at 1.0: the median over 12 is 1.0, no regression;
    # seeds 3-12 at 0.97 too: a regression over 12 seeds
    later = {"value": 1.0}
    calls: list[int] = []

    def fake_run(points: Sequence[GridPoint], *_: object) -> tuple[GridResult, ...]:
        calls.append(len(points))
        return tuple(_result(p, 0.97 if p.seed <= 2 else later["value"]) for p in points)

    monkeypatch.setattr(cli_grid, "run_grid", fake_run)
    args = ["grid", "--models", "opteron-242-2node", "--workloads", "read", "--dists", "zipf"]
    args += ["--threads", "1", "--paths", "live", "--seeds", "2", "--ws-points", "1"]
    args += ["--out", str(tmp_path), "--check", "--json"]
    good = runner.invoke(app, args)
    assert good.exit_code == 0, good.stderr
    assert calls == [2, CONFIRM_SEEDS - 2]
    (point,) = json.loads(good.stdout)["points"]
    assert point["seeds"] == list(range(1, CONFIRM_SEEDS + 1)) and point["median"] == 1.0
    later["value"] = 0.97
    bad = runner.invoke(app, args)
    assert bad.exit_code == 1, bad.stderr


# --- a real run and user errors through the CLI ----------------------------------------


def test_tiny_real_run_writes_the_json_the_table_and_a_png(tmp_path: Path) -> None:
    args = ["grid", "--models", "opteron-242-2node", "--workloads", "read", "--dists", "uniform"]
    args += ["--threads", "1", "--ws-points", "2", "--seeds", "2", "--workers", "2"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert len(doc["results"]) == 2 * 2 * 2  # working sets x seeds x paths
    assert all(set(r["baselines"]) == {"linux", "unicache", "oracle"} for r in doc["results"])
    assert len(doc["points"]) == 4 and all(len(p["speedups"]) == 2 for p in doc["points"])
    assert [(g["path"], g["points"]) for g in doc["groups"]] == [("live", 2), ("whatif", 2)]
    assert json.loads((tmp_path / "results.json").read_text()) == doc
    md = (tmp_path / "grid.md").read_text()
    assert "| opteron-242-2node | read | live | 2 |" in md
    png = tmp_path / "grid-opteron-242-2node.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--models", "cray-1"], "no machine model 'cray-1'"),
        (["--workloads", "sort"], "--workloads: unknown 'sort'"),
        (["--models", "core-i7-860"], "has one LLC group"),
        (["--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["grid", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr + result.stdout


def test_a_failing_point_is_one_line_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_run(*_: object) -> tuple[GridResult, ...]:
        raise UnicacheError("grid point opteron-16 read uniform 1t live 1 MiB s1: boom")

    monkeypatch.setattr(cli_grid, "run_grid", failing_run)
    result = runner.invoke(app, ["grid", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "grid point opteron-16" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
