"""The simulated guest pays what the shim benchmark measured: ``make bench`` writes the
simulator's calibration (unicache_sim/guest/shimcost.toml) from the shim's run, and the shipped
file is the run whose table docs/PERFORMANCE.md's shim block shows."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from unicache.cli.bench import load_bench
from unicache.errors import BenchError, ConfigError
from unicache_sim.guest import shimcost
from unicache_sim.guest.shimcost import TABLE_STATES

ROOT = Path(__file__).resolve().parents[2]
SIZES = (512, 4096, 16384, 65536, 262144)


@pytest.fixture(scope="module")
def cal() -> ModuleType:
    return load_bench("shim_calibration")


def _doc() -> dict[str, Any]:
    cells = [{"kind": "read", "pattern": "seq", "table": t, "size": s,
              "ci_high_ns": 10.0 * i + j, "ci_low_ns": 0.0, "added_ns": 1.0}
             for i, t in enumerate(TABLE_STATES) for j, s in enumerate(SIZES)]
    cells.append({"kind": "pread", "pattern": "seq", "table": "placed", "size": 4096,
                  "ci_high_ns": 999.0, "ci_low_ns": 0.0, "added_ns": 1.0})
    return {"cells": cells}


def test_the_calibration_is_each_sequential_reads_upper_bound(cal: ModuleType) -> None:
    cost = shimcost.parse(cal.calibration_toml(_doc(), "2026-11-28 12:00 UTC", "cmd", 2.5))
    assert cost.clock_ghz == 2.5 and cost.sizes == SIZES
    for i, t in enumerate(TABLE_STATES):
        assert cost.ns[t] == tuple(10.0 * i + j for j in range(len(SIZES)))
    assert "cmd, 2026-11-28 12:00 UTC" in cost.source


def test_a_run_without_every_sequential_read_cell_is_refused(cal: ModuleType) -> None:
    doc = _doc()
    doc["cells"] = [c for c in doc["cells"] if not (c["table"] == "none" and c["size"] == 512)]
    with pytest.raises(BenchError, match="none 512"):
        cal.calibration_toml(doc, "when", "cmd", 2.5)


@pytest.mark.parametrize("text", ["sizes = [1]", "source='x'\nclock_ghz=1\nsizes=[2, 1]\n"
                                  "none_ns=[0,0]\nunplaced_ns=[0,0]\nplaced_ns=[0,0]"])
def test_a_broken_calibration_file_is_one_clear_error(text: str) -> None:
    with pytest.raises(ConfigError, match="shimcost.toml"):
        shimcost.parse(text)


def test_the_shipped_calibration_is_the_run_the_performance_page_shows() -> None:
    page = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    block = re.search(r"<!-- bench:shim -->(.*?)<!-- /bench:shim -->", page, re.DOTALL)
    assert block, "docs/PERFORMANCE.md has no shim block: run make bench"
    rows = [line.split("|")[1:-1] for line in block.group(1).splitlines()
            if line.startswith("|")]
    head = [c.strip() for c in rows[0]]
    cost = shimcost.SHIM_COST
    for state in TABLE_STATES:
        row = next((r for r in rows if r[0].strip() == state and r[1].strip() == "read seq"),
                   None)
        assert row is not None, f"no 'read seq' row of table {state} in the shim block"
        for size, ns in zip(cost.sizes, cost.ns[state], strict=True):
            label = f"{size // 1024} KiB" if size >= 1024 else f"{size} B"
            cell = row[head.index(label)]
            assert f"{ns:+.1f}]" in cell, (state, size, ns, cell)
