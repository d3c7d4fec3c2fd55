"""``unicache density`` as a user runs it: one line per error (exit 2), --json, and a host CLI
that starts without the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNICACHE = str(Path(sys.executable).parent / "unicache")


def run(*args: str, cwd: Path = ROOT,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **(env or {}))
    try:
        import unicache_sim

        # the same simulator as this test process
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(unicache_sim.__file__).parents[1]), env.get("PYTHONPATH", "")]
        )
    except ImportError:
        pass
    return subprocess.run(
        [UNICACHE, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["density"], "give exactly one of --mix FILE and --random-mixes N"),
        (["density", "--random-mixes", "2", "--mix", "m.toml"],
         "give exactly one of --mix FILE and --random-mixes N"),
        (["density", "--random-mixes", "2", "--model", "nope"], "no machine model 'nope'"),
        (["density", "--random-mixes", "2", "--policies", "linux,magic"],
         "--policies: unknown 'magic'"),
        (["density", "--random-mixes", "2", "--seeds", "0"], "--seeds must be at least 1"),
        (["density", "--random-mixes", "2", "--overcommit", "0.5"], "--overcommit must be"),
        (["density", "--mix", "/nonexistent/mix.toml"], "cannot read mix file"),
        (["density", "--live", "--guests", "4"], "--guests must be within 1..3"),
        (["density", "--live", "--guests", "0"], "--guests must be within 1..3"),
        (["density", "--live", "--vcpus", "3"], "--vcpus must be within 1..2"),
        (["density", "--live", "--seconds", "0.5"], "--seconds must be within 1..600"),
        (["density", "--live", "--random-mixes", "2"], "--live runs one mix"),
        (["density", "--live", "--model", "nope"], "no machine model 'nope'"),
        (["density", "--live", "--overcommit", "0.5"], "--overcommit must be"),
    ],
    ids=["no-mix", "two-mixes", "unknown-model", "unknown-policy", "no-seed",
         "overcommit", "missing-mix-file", "live-too-many-guests", "live-no-guest",
         "live-vcpus", "live-seconds", "live-random-mixes", "live-unknown-model",
         "live-overcommit"],
)
def test_a_user_error_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    out = run(*args)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("unicache: error: ") and message in lines[0]


def test_live_without_a_guest_image_says_make_image_in_one_line(tmp_path: Path) -> None:
    out = run("density", "--live", env={"UNICACHE_IMAGE_DIR": str(tmp_path / "none")})
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "run `make image`" in lines[0], out.stderr


def test_live_runs_only_tenants_that_read_files(tmp_path: Path) -> None:
    mix = tmp_path / "mix.toml"
    mix.write_text('[[mix]]\nname = "b"\nflavors = { build = 1, web = 1 }\n')
    out = run("density", "--live", "--mix", str(mix))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "flavor build runs mergesort" in lines[0], out.stderr
    mix.write_text('[[mix]]\nname = "a"\nflavors = { web = 1 }\n'
                   '[[mix]]\nname = "b"\nflavors = { kv = 1 }\n')
    out = run("density", "--live", "--mix", str(mix))
    assert out.returncode == 2 and "--live runs one mix" in out.stderr, out.stderr


def test_a_bad_catalogue_is_one_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "cat.toml"
    bad.write_text('[flavor.x]\nvcpus = 0\nmemory_mib = 1\nslo = "none"\n'
                   '[flavor.x.workload]\nkind = "idle"\n[flavor.y]\nvcpus = 1\n')
    out = run("density", "--random-mixes", "1", "--catalogue", str(bad))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 4, lines
    assert all(line.startswith(f"unicache: error: {bad}: flavor ") for line in lines)


def test_the_host_cli_starts_without_the_simulator_and_says_so_in_one_line() -> None:
    code = (
        "import sys\n"
        "import unicache.cli\n"
        "assert 'unicache_sim' not in sys.modules, 'imported at start-up'\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'unicache_sim':\n"
        "            raise ModuleNotFoundError(name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "sys.argv = ['unicache', 'density', '--random-mixes', '1']\n"
        "unicache.cli.main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (
        "unicache: error: density runs on the simulator, which is not installed (make sim-build)"
    )


def test_json_of_a_tiny_run(tmp_path: Path) -> None:
    mix = tmp_path / "mix.toml"
    mix.write_text('[[mix]]\nname = "tiny"\nflavors = { kv = 1, web = 1 }\n')
    out = run("density", "--model", "opteron-16", "--mix", str(mix), "--overcommit", "2",
              "--window-ms", "0.3", "--workers", "1", "--out", str(tmp_path / "out"), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (entry,) = doc["mixes"]
    assert entry["name"] == "tiny" and entry["file_heavy"] is True
    assert set(entry["vms"]) == {"linux", "unicache"}
    assert all(isinstance(v, int) for v in entry["vms"].values())
    assert {r["flavor"] for r in doc["references"]} == {"kv", "web"}
    for name in ("density.json", "points.parquet", "vms-per-host.png", "p95-tiny.png",
                 "cdf.png"):
        assert (tmp_path / "out" / name).exists(), name
    # a rerun takes every point from the cache
    again = run("density", "--model", "opteron-16", "--mix", str(mix), "--overcommit", "2",
                "--window-ms", "0.3", "--workers", "1", "--out", str(tmp_path / "out"),
                "--json")
    assert json.loads(again.stdout)["cached"] == doc["points"]
