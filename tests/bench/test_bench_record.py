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
from unicache.bench import record
from unicache.cli.bench import app
from unicache.errors import BenchError


@pytest.fixture(scope="module")
def rec() -> ModuleType:
    return record


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
    with pytest.raises(BenchError, match="lacks budgets, cpu, files, rounds"):
        rec.check_schema(shim, {"cells": [], "fds": [], "spawn": [], "seconds": 1})
    with pytest.raises(BenchError, match="no benchmark 'nope'"):
        rec.bench_named("nope")


def _figures(added: float, unit: str = "ns") -> dict[str, float]:
    return {f"added_{unit}": added, f"ci_low_{unit}": added - 1, f"ci_high_{unit}": added + 1,
            "ratio": 0.99, f"control_{unit}": 0.25, f"control_ci_low_{unit}": -0.5,
            f"control_ci_high_{unit}": 3.0}


def test_the_shim_block_is_one_row_group_per_table_then_fds_starts_budgets(
    rec: ModuleType
) -> None:
    cells = [{"kind": k, "size": s, "pattern": p, "table": t, **_figures(s / 1024)}
             for t in ("placed", "none") for k in ("read", "fread") for p in ("seq", "reread")
             for s in (512, 4096)]
    cells[1]["control_ci_high_ns"] = -7.5  # placed read seq 4 KiB: the widest control
    doc = {"cells": cells, "fds": [{"kind": "pipe", "size": 4096, **_figures(2.0)}],
           "spawn": [{"kind": "exec", "command": ["/bin/true"], **_figures(50.0, "us")}],
           "budgets": [{"case": "placed-4k", "limit_ns": 40.0, "upper_ns": 5.0, "met": True,
                        "floor": {"low_ns": -1.0, "median_ns": 2.5, "high_ns": 4.0}},
                       {"case": "unplaced-4k", "limit_ns": 15.0, "upper_ns": None,
                        "met": None}],
           "files": [], "cpu": 1, "seconds": 0.25, "rounds": 3}
    head, rows = rec.bench_named("shim").render(rec.check_schema(rec.bench_named("shim"), doc))
    assert head == ("table", "call: added ns per call [95 % CI]", "512 B", "4 KiB")
    assert rows[0] == ("placed", "read seq", "+0.5 [-0.5, +1.5]", "+4.0 [+3.0, +5.0]")
    assert [r[:2] for r in rows[:5]] == [
        ("placed", "read seq"), ("placed", "read reread"), ("placed", "fread seq"),
        ("placed", "fread reread"), ("placed", "control (null preload): its widest")]
    assert rows[4][2:] == ("+0.2 [-0.5, +3.0]", "+0.2 [-0.5, -7.5]")
    assert rows[9][0] == "none" and len(rows) == 10 + 1 + 1 + 2
    assert rows[10] == ("fds", "pipe write + read", "",
                        "+2.0 [+1.0, +3.0]; control +0.2 [-0.5, +3.0]")
    assert rows[11][:3] == ("start", "exec (/bin/true), us",
                            "+50.0 [+49.0, +51.0], ratio 0.990; control +0.2 [-0.5, +3.0]")
    assert rows[12][1:3] == ("placed-4k <= 40 ns", "upper 5.0: met; floor +2.5 [-1.0, +4.0]")
    assert rows[13][1:3] == ("unplaced-4k <= 15 ns", "not run")
    assert all(len(r) == len(head) for r in rows)


def _files(sample: str, max_bytes: int, shift: int, size: int, added: float
           ) -> dict[str, object]:
    return {"sample": sample, "sample_bytes": max_bytes, "sample_shift": shift, "size": size,
            **_figures(added)}


def test_the_shim_block_ends_with_the_files_table_and_what_it_measures(
    rec: ModuleType
) -> None:
    shim = rec.bench_named("shim")
    files = [_files("sampled", 65536, 3, s, 300.0) for s in (4096, 65536)]
    files += [_files("every", 0, 0, s, 600.0) for s in (4096, 65536)]
    files += [_files("never", 65536, 15, 4096, 100.0)]  # no 64 KiB cell: an empty cell
    files[1]["control_ci_low_ns"] = -40.0  # sampled 64 KiB: the widest control of its size
    doc = {"cells": [{"kind": "read", "size": 4096, "pattern": "seq", "table": "none",
                      **_figures(4.0)}], "fds": [], "spawn": [], "budgets": [],
           "files": files, "files_per_dir": 256, "table_entries": 8192}
    body = rec.block(shim, doc, "2026-11-29 12:00 UTC", (0.5, 0.5))
    calls, text, table = body.split("\n\n")[-3:]
    assert calls.startswith("| table | call: added ns per call")
    assert text.startswith("Files: what a program that reads many small files (tar")
    assert "256 page-cached files" in text and "8,192 entries" in text
    assert table.splitlines() == [
        "| files | open sample: added ns per file [95 % CI] | 4 KiB | 64 KiB |",
        "|---|---|---|---|",
        "| files | sampled: 1 in 8 opens of files up to 64 KiB counted | +300.0 [+299.0, +301.0] "
        "| +300.0 [+299.0, +301.0] |",
        "| files | every: every open counted | +600.0 [+599.0, +601.0] | +600.0 [+599.0, "
        "+601.0] |",
        "| files | never: 1 in 32,768 opens of files up to 64 KiB counted | +100.0 [+99.0, "
        "+101.0] |  |",
        "| files | control (null preload): its widest | +0.2 [-0.5, +3.0] | +0.2 [-40.0, "
        "+3.0] |"]
    # a run of before the files cells: the calls' table alone
    assert rec.block(shim, {**doc, "files": []}, "when", (0.5, 0.5)).endswith(calls)


def test_every_benchmark_has_a_tiny_size_and_a_block(rec: ModuleType) -> None:
    names = [b.name for b in rec.BENCHES]
    assert names == ["shim", "policy", "live", "programs", "sim"]
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
    assert shim["cells"] and shim["budgets"] and sim["accesses"] > 0
    page = doc.read_text()
    assert "Hand-written analysis before." in page and "Hand-written analysis after." in page
    assert "old table" not in page
    assert "unicache bench shim --rounds 25 --quick --rounds 1 --json" in page
    assert "| placed | read seq |" in page and "| budget | unplaced-4k <= 15 ns |" in page
    # the files cells, --quick's one size under each open sample
    assert {(f["sample"], f["size"]) for f in shim["files"]} == {
        ("sampled", 16384), ("every", 16384), ("never", 16384)}
    assert "| files | every: every open counted |" in page
    assert "unicache-sim bench --accesses 200000 --repeats 1 --json" in page
    for name in ("shim", "sim"):
        assert page.count(f"<!-- bench:{name} -->") == page.count(f"<!-- /bench:{name} -->") == 1


def test_record_of_an_unknown_benchmark_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["record", "--only", "shim,nope", "--doc",
                                   str(tmp_path / "p.md")])
    assert res.exit_code == 2
    assert res.output.strip() == ("unicache bench record: no benchmark 'nope' (there are "
                                  "shim, policy, live, programs, sim)")


def test_bench_live_out_of_range_is_one_line_before_any_guest_boots() -> None:
    res = CliRunner().invoke(app, ["live", "--guests", "0"])
    assert res.exit_code == 2
    assert res.output.strip() == ("unicache bench live: --guests takes 1 to 3 guests on this "
                                  "bench, not 0")
