"""``make bench`` (``unicache bench record``): every benchmark command runs at a tiny size
and emits its JSON schema, and its table lands in its generated block of the page, the
hand-written text around it untouched (no timing is asserted: docs/PERFORMANCE.md).

The policy round's tiny run is tests/policy/test_bench_policy.py's (it checks the
recorder's schema too); the live one boots a guest: tests/integration/test_bench_live.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner
from unicache.cli.bench import app, load_bench
from unicache.errors import BenchError


@pytest.fixture(scope="module")
def rec() -> ModuleType:
    return load_bench("record")


PAGE = """# Performance

Hand-written analysis before.

<!-- bench:shim -->
old table
<!-- /bench:shim -->

Hand-written analysis after.
"""


def test_splice_replaces_only_its_own_block(rec: ModuleType) -> None:
    page = rec.splice(PAGE, "shim", "new table")
    assert page == PAGE.replace("old table", "new table")
    assert rec.splice(page, "shim", "newer") == PAGE.replace("old table", "newer")


def test_splice_adds_a_missing_block_at_the_end(rec: ModuleType) -> None:
    page = rec.splice(PAGE, "sim", "sim table")
    assert page.startswith(PAGE.rstrip("\n"))
    assert page.endswith("<!-- bench:sim -->\nsim table\n<!-- /bench:sim -->\n")


def test_a_json_without_its_schema_is_refused_naming_what_lacks(rec: ModuleType) -> None:
    shim = rec.bench_named("shim")
    with pytest.raises(BenchError, match="lacks lookup_ns, nt_mbps"):
        rec.check_schema(shim, {"with_mbps": 1, "without_mbps": 1, "ratio": 1,
                                "nt_without_mbps": 1})
    with pytest.raises(BenchError, match="no benchmark 'nope'"):
        rec.bench_named("nope")


def test_every_benchmark_has_a_tiny_size_and_a_block(rec: ModuleType) -> None:
    names = [b.name for b in rec.BENCHES]
    assert names == ["shim", "policy", "live", "sim"]
    for bench in rec.BENCHES:
        assert bench.tiny and bench.command(tiny=True)[-1] == "--json"


def test_record_runs_the_shim_and_simulator_benchmarks_tiny_into_json_and_blocks(
    tmp_path: Path
) -> None:
    doc = tmp_path / "docs" / "PERFORMANCE.md"
    doc.parent.mkdir()
    doc.write_text(PAGE)
    out = tmp_path / "bench"
    res = CliRunner().invoke(app, ["record", "--tiny", "--only", "shim,sim", "--out", str(out),
                                   "--doc", str(doc), "--json"])
    assert res.exit_code == 0, res.output
    assert [r["bench"] for r in json.loads(res.stdout)] == ["shim", "sim"]
    shim = json.loads((out / "shim.json").read_text())
    sim = json.loads((out / "sim.json").read_text())
    assert shim["with_mbps"] > 0 and sim["accesses"] > 0
    page = doc.read_text()
    assert "Hand-written analysis before." in page and "Hand-written analysis after." in page
    assert "old table" not in page
    assert "unicache bench shim --rounds 1 --seconds 0.2 --json" in page
    assert "unicache-sim bench --accesses 200000 --repeats 1 --json" in page
    for name in ("shim", "sim"):
        assert page.count(f"<!-- bench:{name} -->") == page.count(f"<!-- /bench:{name} -->") == 1


def test_record_of_an_unknown_benchmark_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["record", "--only", "shim,nope", "--doc",
                                   str(tmp_path / "p.md")])
    assert res.exit_code == 2
    assert res.output.strip() == ("unicache bench record: no benchmark 'nope' (there are "
                                  "shim, policy, live, sim)")


def test_bench_live_out_of_range_is_one_line_before_any_guest_boots() -> None:
    res = CliRunner().invoke(app, ["live", "--guests", "0"])
    assert res.exit_code == 2
    assert res.output.strip() == ("unicache bench live: --guests takes 1 to 3 guests on this "
                                  "bench, not 0")
