"""The simulated guest pays what the shim benchmark measured: ``make bench`` writes the
simulator's calibration (unicache_sim/guest/shimcost.toml) from the shim's run, and the shipped
file is the run whose table docs/PERFORMANCE.md's shim block shows."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from unicache.bench import shim_calibration
from unicache.errors import BenchError, ConfigError
from unicache_sim.guest import shimcost
from unicache_sim.guest.shimcost import TABLE_STATES

ROOT = Path(__file__).resolve().parents[2]
SIZES = (512, 4096, 16384, 65536, 262144)
FILE_SIZES = (4096, 16384, 65536)


@pytest.fixture(scope="module")
def cal() -> ModuleType:
    return shim_calibration


def _doc() -> dict[str, Any]:
    cells = [{"kind": "read", "pattern": "seq", "table": t, "size": s,
              "ci_high_ns": 10.0 * i + j, "ci_low_ns": 0.0, "added_ns": 1.0}
             for i, t in enumerate(TABLE_STATES) for j, s in enumerate(SIZES)]
    cells.append({"kind": "pread", "pattern": "seq", "table": "placed", "size": 4096,
                  "ci_high_ns": 999.0, "ci_low_ns": 0.0, "added_ns": 1.0})
    # files cells: every open counted 1000 + j, none 500 + j, the agent's mix 700 + j
    files = [{"sample": sample, "size": s, "ci_high_ns": base + j, "ci_low_ns": 0.0,
              "added_ns": 1.0}
             for sample, base in (("sampled", 700.0), ("every", 1000.0), ("never", 500.0))
             for j, s in enumerate(FILE_SIZES)]
    return {"cells": cells, "files": files}


def test_the_calibration_is_each_sequential_reads_upper_bound(cal: ModuleType) -> None:
    cost = shimcost.parse(cal.calibration_toml(_doc(), "2026-11-28 12:00 UTC", "cmd", 2.5))
    assert cost.clock_ghz == 2.5 and cost.sizes == SIZES
    for i, t in enumerate(TABLE_STATES):
        assert cost.ns[t] == tuple(10.0 * i + j for j in range(len(SIZES)))
    assert "cmd, 2026-11-28 12:00 UTC" in cost.source


def test_the_calibration_writes_each_files_cells_upper_bound_counted_and_skipped(
    cal: ModuleType
) -> None:
    text = cal.calibration_toml(_doc(), "2026-11-28 12:00 UTC", "cmd", 2.5)
    keys = tomllib.loads(text)
    assert keys["file_sizes"] == list(FILE_SIZES)
    # every: the cost of a counted file; never: of a skipped one; the agent's mix is not
    # a calibration point
    assert keys["file_counted_ns"] == [1000.0, 1001.0, 1002.0]
    assert keys["file_skipped_ns"] == [500.0, 501.0, 502.0]
    assert "small files (open, fstat, read to EOF, close)" in keys["source"]
    assert "cmd, 2026-11-28 12:00 UTC" in keys["source"]


def test_a_run_without_every_files_cell_is_refused(cal: ModuleType) -> None:
    doc = _doc()
    doc["files"] = [f for f in doc["files"] if (f["sample"], f["size"]) != ("never", 65536)]
    with pytest.raises(BenchError, match="files cells .* missing never 65536$"):
        cal.calibration_toml(doc, "when", "cmd", 2.5)
    del doc["files"]  # a run of before the files cells
    with pytest.raises(BenchError, match="missing every 4096, every 16384"):
        cal.calibration_toml(doc, "when", "cmd", 2.5)


def test_the_calibration_is_written_under_a_root_of_its_own(cal: ModuleType,
                                                           tmp_path: Path) -> None:
    path = cal.write_calibration(tmp_path, _doc(), "when", "cmd")
    assert path == tmp_path / "tools/sim/python/unicache_sim/guest/shimcost.toml"
    assert tomllib.loads(path.read_text())["file_counted_ns"][0] == 1000.0


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


def _size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def _shim_block_rows() -> list[list[str]]:
    page = (ROOT / "docs" / "PERFORMANCE.md").read_text()
    block = re.search(r"<!-- bench:shim -->(.*?)<!-- /bench:shim -->", page, re.DOTALL)
    assert block, "docs/PERFORMANCE.md has no shim block: run make bench"
    return [[c.strip() for c in line.split("|")[1:-1]] for line in block.group(1).splitlines()
            if line.startswith("|")]


def test_the_shipped_calibration_is_the_run_the_performance_page_shows() -> None:
    rows = _shim_block_rows()
    head = rows[0]
    cost = shimcost.SHIM_COST
    for state in TABLE_STATES:
        row = next((r for r in rows if r[0] == state and r[1] == "read seq"), None)
        assert row is not None, f"no 'read seq' row of table {state} in the shim block"
        for size, ns in zip(cost.sizes, cost.ns[state], strict=True):
            cell = row[head.index(_size_label(size))]
            assert f"{ns:+.1f}]" in cell, (state, size, ns, cell)


def test_the_shipped_files_calibration_is_the_run_the_performance_page_shows() -> None:
    # read as the file is, whatever shimcost.py makes of it: the files keys are written
    # by every calibration since the files cells, and the page's files table beside them
    shipped = tomllib.loads((ROOT / "tools/sim/python/unicache_sim/guest/shimcost.toml")
                            .read_text())
    rows = _shim_block_rows()
    head = next((r for r in rows if r[0] == "files" and r[1].startswith("open sample")), None)
    assert head is not None, "no files table in the shim block, but files keys in shimcost.toml"
    for sample, key in (("every", "file_counted_ns"), ("never", "file_skipped_ns")):
        row = next((r for r in rows if r[0] == "files" and r[1].startswith(f"{sample}:")),
                   None)
        assert row is not None, f"no files row of the {sample} open sample in the shim block"
        for size, ns in zip(shipped["file_sizes"], shipped[key], strict=True):
            cell = row[head.index(_size_label(size))]
            assert f"{ns:+.1f}]" in cell, (sample, size, ns, cell)
