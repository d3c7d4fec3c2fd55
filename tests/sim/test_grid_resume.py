"""unicache-sim grid --resume: an interrupted grid keeps what it finished and runs the rest."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner
from unicache_sim.build import build_fingerprint
from unicache_sim.cli import grid as cli_grid
from unicache_sim.cli.main import app
from unicache_sim.experiments.mfc.read import BaselineResult, PointResult
from unicache_sim.grid.store import (
    CHECKPOINT_NAME,
    CheckpointWriter,
    load_checkpoint,
)
from unicache_sim.grid.sweep import GridPoint, GridResult

if "mix_stderr" in inspect.signature(CliRunner).parameters:
    runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg,unused-ignore]
else:
    runner = CliRunner()

# opteron-242-2node, read, zipf, 1 thread: 2 paths x 2 working sets x 2 seeds = 8 points
ARGS = ["grid", "--models", "opteron-242-2node", "--workloads", "read", "--dists", "zipf"]
ARGS += ["--threads", "1", "--ws-points", "2", "--seeds", "2"]
POINTS = 8

Progress = Callable[[GridResult], None]


def _result(point: GridPoint) -> GridResult:
    # a speedup that names the point, so a mixed-up result shows in the JSON
    speedup = 1.0 + point.seed / 10 + point.ws_mb / 1000

    def base(name: str, mb_per_s: float) -> BaselineResult:
        return BaselineResult(name, mb_per_s, 0.25, 0.5, 40, 0.125, 1 << 20)

    outcome = PointResult(
        point.ws_mb,
        (base("linux", 100.0), base("unicache", 100.0 * speedup), base("oracle", 300.0)),
    )
    return GridResult(point, outcome)


class _Runner:
    """Stands in for run_grid: records the points asked for, may stop after a few."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.asked: list[GridPoint] = []
        self.stop_after = stop_after

    def __call__(
        self, points: Sequence[GridPoint], _w: int, _s: str | None, progress: Progress
    ) -> tuple[GridResult, ...]:
        self.asked = list(points)
        done = []
        for n, point in enumerate(points):
            if self.stop_after is not None and n == self.stop_after:
                raise KeyboardInterrupt
            done.append(_result(point))
            progress(done[-1])
        return tuple(done)


def _speedups(out: Path) -> dict[tuple[str, float, int], float]:
    doc = json.loads((out / "results.json").read_text())
    return {(r["path"], r["ws_mb"], r["seed"]): r["speedup"] for r in doc["results"]}


def test_an_interrupted_grid_resumes_with_only_the_missing_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _Runner(stop_after=3)
    monkeypatch.setattr(cli_grid, "run_grid", first)
    stopped = runner.invoke(app, [*ARGS, "--out", str(tmp_path)])
    assert stopped.exit_code == 130
    assert "--resume" in stopped.stderr and "Traceback" not in stopped.stderr
    assert len(load_checkpoint(tmp_path / CHECKPOINT_NAME, build_fingerprint()).results) == 3

    second = _Runner()
    monkeypatch.setattr(cli_grid, "run_grid", second)
    resumed = runner.invoke(app, [*ARGS, "--out", str(tmp_path), "--resume"])
    assert resumed.exit_code == 0, resumed.stderr
    assert "resuming: 3 of 8 points" in resumed.stderr
    assert len(second.asked) == POINTS - 3
    assert not set(second.asked) & set(first.asked[:3])
    # every point once, each with its own result, whichever run made it
    speedups = _speedups(tmp_path)
    assert len(speedups) == POINTS
    for (_, ws, seed), speedup in speedups.items():
        assert speedup == pytest.approx(1.0 + seed / 10 + ws / 1000)
    assert json.loads((tmp_path / "results.json").read_text())["resumed"] == 3
    assert "after 3 runs resumed" in (tmp_path / "grid.md").read_text()
    # and the checkpoint now holds the whole grid: a third run computes nothing
    third = _Runner()
    monkeypatch.setattr(cli_grid, "run_grid", third)
    assert runner.invoke(app, [*ARGS, "--out", str(tmp_path), "--resume"]).exit_code == 0
    assert third.asked == []


def test_without_resume_the_checkpoint_starts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_grid, "run_grid", _Runner())
    assert runner.invoke(app, [*ARGS, "--out", str(tmp_path)]).exit_code == 0
    again = _Runner()
    monkeypatch.setattr(cli_grid, "run_grid", again)
    assert runner.invoke(app, [*ARGS, "--out", str(tmp_path)]).exit_code == 0
    assert len(again.asked) == POINTS


def test_results_of_another_build_and_torn_lines_are_never_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_grid, "run_grid", _Runner())
    assert runner.invoke(app, [*ARGS, "--out", str(tmp_path)]).exit_code == 0
    checkpoint = tmp_path / CHECKPOINT_NAME
    lines = checkpoint.read_text().splitlines()
    assert len(lines) == POINTS
    other = json.loads(lines[0]) | {"build": "0" * 16}
    wrong_type = json.loads(lines[1])
    wrong_type["point"]["seed"] = "1"
    # a line from another build, a line of the wrong shape, a line cut by a kill
    lines[0] = json.dumps(other)
    lines[1] = json.dumps(wrong_type)
    lines[2] = lines[2][: len(lines[2]) // 2]
    checkpoint.write_text("\n".join(lines) + "\n")

    again = _Runner()
    monkeypatch.setattr(cli_grid, "run_grid", again)
    result = runner.invoke(app, [*ARGS, "--out", str(tmp_path), "--resume"])
    assert result.exit_code == 0, result.stderr
    assert "5 of 8 points" in result.stderr
    assert "1 written by another build dropped" in result.stderr
    assert "2 unreadable lines dropped" in result.stderr
    assert len(again.asked) == 3
    # the rewritten checkpoint holds only this build's whole results
    assert len(checkpoint.read_text().splitlines()) == POINTS


def test_a_checkpoint_line_gives_back_the_same_result(tmp_path: Path) -> None:
    point = GridPoint("epyc-2s", "md5sum", "uniform", 4, "whatif", 0.375, 3, "parallel", 1 << 24)
    original = _result(point)
    path = tmp_path / CHECKPOINT_NAME
    with CheckpointWriter(path, "b1") as writer:
        writer.write(original)
    assert load_checkpoint(path, "b1").results == {point: original}
    assert load_checkpoint(path, "b2").results == {}
    assert load_checkpoint(path, "b2").stale == 1


def test_the_build_fingerprint_changes_with_a_model_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import unicache

    before = build_fingerprint()
    assert build_fingerprint() == before  # stable
    fake_pkg = tmp_path / "unicache"
    fake_pkg.mkdir()
    (fake_pkg / "__init__.py").write_text("")
    (fake_pkg / "m.toml").write_text("a = 1\n")
    monkeypatch.setattr(unicache, "__file__", str(fake_pkg / "__init__.py"))
    one = build_fingerprint()
    (fake_pkg / "m.toml").write_text("a = 2\n")
    assert build_fingerprint() not in (one, before)


def test_an_unwritable_output_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / CHECKPOINT_NAME).mkdir()  # a directory where the checkpoint file goes
    result = runner.invoke(app, [*ARGS, "--out", str(out)])
    assert result.exit_code == 2
    assert "cannot use the checkpoint" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
