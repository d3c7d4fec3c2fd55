"""``unicache bench programs`` through ``make bench``'s recorder, at its tiny size: one real
guest (the project's image, QEMU), its agent running, no daemon, one round.

It checks what could fail, never a timing: the command exits 0 with its JSON schema; the
guest's table was there, valid and empty (nothing placed); every program ran twice on each
side with the same output every time; the shim counted the reads of every program whose
reads it can see (a run where it did nothing must not pass: the bench's own check is held
against made-up runs here too); the table is in its block and no QEMU of the run is left.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from unicache.bench import guest_programs as bench
from unicache.bench import guest_programs_checks as checks
from unicache.errors import BenchError

from tests.integration.benchtools import UNICACHE, record_tiny

PROGRAMS = ["tar", "grep", "sha256sum", "python3", "sqlite3"]


def _run(side: str, counted_bytes: int, clients: int | None = None) -> dict[str, Any]:
    clients = (1 if side == "with" else 0) if clients is None else clients
    return {"side": side, "seconds": 0.1, "exit": 0, "digest": "d", "first_line": "",
            "stderr": "", "counted_bytes": counted_bytes, "counted_reads": 1, "clients": clients}


def test_a_run_where_the_shim_counted_nothing_fails_the_bench() -> None:
    grep = next(p for p in bench.programs(bench.TINY) if p.name == "grep")
    assert checks.check_runs(grep, [_run("with", 4096), _run("without", 0)], None) == "d"
    with pytest.raises(BenchError, match="counted no read of grep"):
        checks.check_runs(grep, [_run("with", 0), _run("without", 0)], None)
    with pytest.raises(BenchError, match="not live in grep"):
        checks.check_runs(grep, [_run("with", 0, clients=0)], None)
    with pytest.raises(BenchError, match="without the shim still counted"):
        checks.check_runs(grep, [_run("without", 4096)], None)
    with pytest.raises(BenchError, match="without the shim still counted"):
        checks.check_runs(grep, [_run("without", 0, clients=1)], None)
    with pytest.raises(BenchError, match="other output"):
        checks.check_runs(grep, [_run("with", 4096)], "e")
    with pytest.raises(BenchError, match="holds 3 entries"):
        checks.check_table({"exists": True, "valid": True, "entries": 3, "path": "t"})


def test_under_a_sample_that_leaves_out_every_open_liveness_rests_on_the_mapping() -> None:
    layout = (Path(__file__).parents[2] / "guest-agent" / "shim" / "uc_layout.h").read_text()
    assert f"#define UC_SAMPLE_SHIFT_MAX {bench.MAX_SHIFT}u" in layout
    grep = next(p for p in bench.programs(bench.TINY) if p.name == "grep")
    runs = [_run("with", 0), _run("without", 0)]
    assert checks.check_runs(grep, runs, None, counts_expected=False) == "d"
    with pytest.raises(BenchError, match="not live in grep"):
        checks.check_runs(grep, [_run("with", 0, clients=0)], None, counts_expected=False)


def test_bench_programs_rejects_a_bad_open_sample_in_one_line() -> None:
    run = subprocess.run([UNICACHE, "bench", "programs", "--open-sample", "all"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "--open-sample" in run.stderr


def test_bench_programs_rejects_bad_rounds_in_one_line() -> None:
    run = subprocess.run([UNICACHE, "bench", "programs", "--rounds", "0"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "--rounds" in run.stderr


def test_bench_programs_rejects_an_unknown_clock_in_one_line() -> None:
    run = subprocess.run([UNICACHE, "bench", "programs", "--clock", "sundial"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "--clock" in run.stderr


def test_bench_programs_tiny_runs_every_program_on_both_sides(tmp_path: Path) -> None:
    rec = record_tiny("programs", tmp_path, "ucbench-programs")
    res = rec.result
    assert res["bench"] == "programs" and res["rounds"] == 1 and res["tiny"] is True
    assert res["goal"] == 0.98 and isinstance(res["all_met"], bool)
    # under TCG the guest's clock counts instructions (one vCPU), under KVM it is the host's
    assert res["clock"] == ("instructions" if res["accel"] == "tcg" else "wall"), res
    assert res["guest"]["vcpus"] == (1 if res["clock"] == "instructions" else 2)
    table = res["table"]
    assert table["exists"] and table["valid"] and table["entries"] == 0, table
    assert res["guest"]["agent_pid"] > 0
    assert [p["name"] for p in res["programs"]] == PROGRAMS
    for p in res["programs"]:
        assert p["pairs"] == 2, p
        assert len(p["with_runs_s"]) == len(p["without_runs_s"]) == 2, p
        assert all(s > 0 for s in p["with_runs_s"] + p["without_runs_s"]), p
        assert p["with_s"] > 0 and p["without_s"] > 0
        assert p["ci_low"] <= p["ratio"] <= p["ci_high"], p
        assert p["met"] == (p["ratio"] >= res["goal"])
        # the same output on both sides, every run
        assert len(set(p["with_digests"] + p["without_digests"])) == 1, p
        if p["counted"]:
            assert p["counted_bytes"] > 0 and p["counted_reads"] > 0, p
    by_name = {p["name"]: p for p in res["programs"]}
    assert not by_name["sha256sum"]["counted"]  # stdio: the shim cannot see its reads
    assert int(by_name["tar"]["output"]) > 0  # wc -c of the archive
    assert len(by_name["sqlite3"]["output"].split("|")) == 3, by_name["sqlite3"]
    # what the shim's costs rest on: the calls it chooses between, and process starts with
    # no preload, a preload that does nothing, the shim and the shim switched off
    assert set(res["calls"]) == {"getppid", "open_close", "open_fstat_close",
                                 "open_classic_fstat_close"}
    assert set(res["starts"]) == {"/bin/true", "/bin/cat /dev/null"}
    assert all(set(t) == {"none", "null", "shim", "off"} for t in res["starts"].values())
    assert "<!-- bench:programs -->" in rec.page and "unicache bench programs" in rec.page
    assert "| python3 |" in rec.page
    print(f"bench programs tiny: {rec.seconds:.0f} s")
