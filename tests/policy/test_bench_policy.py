"""``unicache bench policy --json`` runs at a tiny size and emits its schema (no timings
are asserted: performance figures live in docs/PERFORMANCE.md)."""

from __future__ import annotations

import json

from typer.testing import CliRunner
from unicache.bench import record as rec
from unicache.cli.bench import app

POINT_KEYS = {
    "vms",
    "chunks",
    "tracked_chunks",
    "records_per_round",
    "rounds",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "cpu_p50_ms",
    "cpu_p99_ms",
    "state_bytes",
    "bytes_per_chunk",
    "peak_rss_mib",
    "gc_p50_ms",
    "gc_max_ms",
    "gc_full_ms",
    "round_ms",
}


def test_bench_policy_json_has_its_schema(tmp_path) -> None:
    png = tmp_path / "round.png"
    res = CliRunner().invoke(
        app,
        [
            "policy",
            "--vms",
            "3,5",
            "--chunks",
            "40",
            "--rounds",
            "2",
            "--model",
            "opteron-16",
            "--changed-fraction",
            "0.5",
            "--plot",
            str(png),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["schema"] == 1 and doc["bench"] == "policy" and doc["model"] == "opteron-16"
    assert doc["load"]["changed_fraction"] == 0.5
    assert [(p["vms"], p["chunks"]) for p in doc["points"]] == [(3, 40), (5, 40)]
    for point in doc["points"]:
        assert set(point) == POINT_KEYS
        assert point["rounds"] == len(point["round_ms"]) == 2
        assert 0 < point["tracked_chunks"] <= 40 and point["bytes_per_chunk"] > 0
        assert point["p50_ms"] <= point["p99_ms"] <= point["max_ms"]
        # the daemon's collector pacing ran between the rounds, its first pass full
        assert point["gc_full_ms"] > 0 and 0 <= point["gc_p50_ms"] <= point["gc_max_ms"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    # make bench records this JSON: it holds the recorder's schema and makes its table
    bench = rec.bench_named("policy")
    _, rows = bench.render(rec.check_schema(bench, doc))
    assert len(rows) == 2


def test_bench_policy_bad_size_is_one_line() -> None:
    res = CliRunner().invoke(app, ["policy", "--vms", "ten", "--json"])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1
    assert res.output.startswith(
        "unicache bench policy: --vms takes whole numbers separated by commas, not 'ten'"
    )
