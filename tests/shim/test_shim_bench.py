"""``unicache bench shim``: its driver (uc_bench), its statistics and its JSON, run tiny.

No timing is asserted (the machine is shared): only that each figure is there, that every
interval holds its median, that the control (the null preload) reads within a fraction of a
call of zero, that the shim really ran (it counted the bench file's reads) and that bad
options are one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner
from unicache.bench import shim as shim_bench_module
from unicache.bench import shim_cells, shim_files, shim_stats, shim_tables
from unicache.cli.bench import app
from unicache.errors import BenchError

from tests.shim.shimtools import SHIM_DIR

FIGURE_KEYS = {"added_ns", "ci_low_ns", "ci_high_ns", "ratio", "with_ns", "without_ns",
               "control_ns", "control_ci_low_ns", "control_ci_high_ns", "blocks",
               "round_added_ns"}
CELL_KEYS = {"kind", "size", "pattern", "table", *FIGURE_KEYS}
FILES_KEYS = {"size", "sample", "sample_bytes", "sample_shift", "table", *FIGURE_KEYS}


@pytest.fixture(scope="module")
def shim_bench() -> ModuleType:
    module = shim_bench_module
    module.build_shim()
    return module


def _ordered(doc: dict[str, object], unit: str = "ns") -> None:
    for what in ("", "control_"):
        mid = doc[f"{what}{unit}" if what else f"added_{unit}"]
        assert doc[f"{what}ci_low_{unit}"] <= mid <= doc[f"{what}ci_high_{unit}"], doc  # type: ignore[operator]


def test_bench_shim_quick_json_has_every_figure(shim_bench: ModuleType) -> None:
    res = CliRunner().invoke(app, ["shim", "--quick", "--json"])
    assert res.exit_code == 0, res.output
    fig = json.loads(res.stdout)
    assert {c["table"] for c in fig["cells"]} == {"placed", "unplaced", "none"}
    assert {(c["kind"], c["size"], c["pattern"]) for c in fig["cells"]} == {
        ("read", 4096, "seq"), ("read", 65536, "seq")}
    for cell in fig["cells"]:
        assert set(cell) >= CELL_KEYS, cell
        _ordered(cell)
        assert cell["blocks"] > 0 and cell["with_ns"] > 0 and cell["without_ns"] > 0
        # the control: a preload that does nothing adds nothing (within half a call)
        assert abs(cell["control_ns"]) < cell["without_ns"] / 2, cell
    assert [f["kind"] for f in fig["fds"]] == ["pipe", "socket"]
    for f in fig["fds"]:
        _ordered(f)
    assert [s["kind"] for s in fig["spawn"]] == ["exec", "interpreter"]
    for s in fig["spawn"]:
        _ordered(s, "us")
        assert s["count"] >= 4 and s["with_us"] > 0
    assert [b["case"] for b in fig["budgets"]] == [
        "unplaced-4k", "unplaced-64k", "placed-4k", "pipe", "socket"]
    for b in fig["budgets"]:
        assert b["met"] == (b["upper_ns"] <= b["limit_ns"])
        # each budget stands beside the floor, the least a counting preload does, run in
        # the same cell: an ordered interval of a fraction of a call
        floor = b["floor"]
        assert floor["low_ns"] <= floor["median_ns"] <= floor["high_ns"], b
    budget_cells = [c for c in [*fig["cells"], *fig["fds"]] if "floor_ns" in c]
    assert {(c["kind"], c["size"], c.get("table")) for c in budget_cells} == {
        ("read", 4096, "unplaced"), ("read", 65536, "unplaced"), ("read", 4096, "placed"),
        ("pipe", 4096, "placed"), ("socket", 4096, "placed")}
    for cell in budget_cells:
        assert abs(cell["floor_ns"]) < cell["without_ns"] / 2, cell
    # the shim ran: it counted the bench file's reads under both tables that name files
    assert fig["counted_reads"]["placed"] > 0 and fig["counted_reads"]["unplaced"] > 0
    assert fig["table_entries"] == 8192 and fig["rounds"] == 1
    # the files cells: --quick's one size under each open sample, ns per file
    assert [(f["sample"], f["size"]) for f in fig["files"]] == [
        ("sampled", 16384), ("every", 16384), ("never", 16384)]
    assert [(f["sample_bytes"], f["sample_shift"]) for f in fig["files"]] == [
        (262144, 3), (0, 0), (262144, 15)]
    for f in fig["files"]:
        assert set(f) >= FILES_KEYS and f["table"] == f"unplaced/{f['sample']}", f
        _ordered(f)
        # a file is an open, an fstat, two reads and a close: more than a read call
        assert f["without_ns"] > 100 and abs(f["control_ns"]) < f["without_ns"] / 2, f
    # with every open counted, the shim counted the files' reads
    assert fig["files_counted_reads"]["every"] > 0 and fig["files_per_dir"] == 256


def test_a_shim_that_counted_nothing_fails_the_bench(
    shim_bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim_tables.TableState, "reads_of_file", lambda _: 0)
    with pytest.raises(BenchError, match="counted no reads of the bench file under the "
                                         "unplaced table"):
        shim_bench.run_shim_bench((4096,), ("read",), ("seq",), ("unplaced",), seconds=0.02,
                                  rounds=1, fds=False, spawn=False, file_sizes=())


def test_a_shim_that_counted_no_file_with_every_open_counted_fails_the_bench(
    shim_bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim_tables.TableState, "reads_counted", lambda _: 0)
    with pytest.raises(BenchError, match="counted no reads of the files cells' files with "
                                         "every open counted"):
        shim_bench.run_shim_bench((4096,), ("read",), ("seq",), ("none",), seconds=0.02,
                                  rounds=1, fds=False, spawn=False, file_sizes=(4096,))


def test_a_driver_not_under_the_shim_is_refused(shim_bench: ModuleType,
                                                tmp_path: Path) -> None:
    cells = shim_cells
    null = SHIM_DIR / "libuc_null.so"
    # the "shim" this driver expects is the null preload: its read is libc's
    driver = cells.Driver(SHIM_DIR / "uc_bench", null, SHIM_DIR / "libunicache.so",
                          SHIM_DIR / "libuc_floor.so", 0, dict(os.environ))
    with pytest.raises(BenchError, match="its pipe is libc's"):
        driver.cell("pipe", 4096, "-", tmp_path, 0.01, null, {})


@pytest.mark.parametrize("size", ["4096", "512"])
def test_the_driver_and_the_statistics_agree(shim_bench: ModuleType, tmp_path: Path,
                                             size: str) -> None:
    data = tmp_path / "data"
    data.write_bytes(os.urandom(2 << 20))
    out = subprocess.run([str(SHIM_DIR / "uc_bench"), "cell", "--kind", "read", "--size", size,
                          "--file", str(data), "--seconds", "0.02", "--blocks"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["interposed"] is False and doc["calls_per_block"] == (1 << 20) // int(size)
    pair = shim_stats.paired(doc["with_blocks"], doc["without_blocks"])
    assert pair.blocks == doc["blocks"] == len(doc["with_blocks"])
    for mine, its in ((pair.added, "added_ns"), (pair.ci_low, "ci_low_ns"),
                      (pair.ci_high, "ci_high_ns"), (pair.with_, "with_ns")):
        assert mine == pytest.approx(doc[its], abs=2e-3), its


def test_the_files_cell_reads_every_file_whole_and_refuses_a_wrong_one(
    shim_bench: ModuleType, tmp_path: Path
) -> None:
    files = shim_files.make_files(tmp_path, 4096)
    assert len(list(files.iterdir())) == shim_files.FILES_PER_DIR
    cell = [str(SHIM_DIR / "uc_bench"), "cell", "--kind", "files", "--size", "4096",
            "--seconds", "0.02", "--blocks"]
    out = subprocess.run([*cell, "--dir", str(files)], capture_output=True, text=True,
                         check=True)
    doc = json.loads(out.stdout)
    # no preload: open and read are libc's; a block is 32 files, its figures ns per file
    assert doc["kind"] == "files" and doc["pattern"] == "-" and doc["interposed"] is False
    assert doc["calls_per_block"] == 32 and doc["blocks"] == len(doc["with_blocks"]) >= 2
    pair = shim_stats.paired(doc["with_blocks"], doc["without_blocks"])
    assert pair.added == pytest.approx(doc["added_ns"], abs=2e-3)
    # a file of another size would not be one read and EOF: the directory is refused
    (files / "f9999").write_bytes(b"x" * 4097)
    bad = subprocess.run([*cell, "--dir", str(files)], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == (f"uc_bench cell: cannot read the files of {files} (1 to "
                                  "4096 readable regular files of exactly 4096 bytes)")
    no_dir = subprocess.run(cell, capture_output=True, text=True, check=False)
    assert no_dir.returncode == 2 and "[--dir D: for files]" in no_dir.stderr


def test_the_interval_ranks_are_the_binomial_ones() -> None:
    stats = shim_stats
    assert stats.ci_rank(100) == 40  # P(B <= 39) = 0.018, P(B <= 40) = 0.028
    assert stats.ci_rank(5) == 1 and stats.ci_rank(1) == 1
    assert abs(stats.ci_rank(10_000) - (5000 - 1.96 * 50)) <= 2
    assert stats.median_ci([float(x) for x in range(1, 101)]) == (40.0, 50.5, 61.0)
    with pytest.raises(ValueError, match="with-blocks"):
        stats.paired([1.0], [])


def test_a_cells_interval_is_over_its_processes_not_their_pooled_blocks() -> None:
    # each process's blocks share its offset: nine processes whose medians spread from -20
    # to +20 ns, each with tight blocks, give an interval as wide as the processes, where
    # the pooled blocks would claim a few ns
    stats = shim_stats
    run_added = [-20.0, -15.0, -10.0, -5.0, 0.0, 5.0, 10.0, 15.0, 20.0]
    with_blocks = [100.0 + a + j * 0.01 for a in run_added for j in range(50)]
    without_blocks = [100.0] * len(with_blocks)
    pooled = stats.paired(with_blocks, without_blocks)
    by_process = stats.paired_runs(run_added, with_blocks, without_blocks)
    assert (by_process.ci_low, by_process.added, by_process.ci_high) == (-15.0, 0.0, 15.0)
    assert pooled.ci_high - pooled.ci_low < 15.0  # what the old interval claimed
    assert by_process.blocks == len(with_blocks)


def test_uc_bench_budget_prints_its_cases_and_exits_by_them(shim_bench: ModuleType,
                                                             tmp_path: Path) -> None:
    from unicache_agent import counters, shm, table_writer

    data = tmp_path / "data"
    data.write_bytes(os.urandom(2 << 20))
    tables = shim_tables.BenchTables(shm, counters, table_writer, tmp_path,
                                                   data, ("unplaced",))
    try:
        env = {**os.environ, **tables.states["unplaced"].env,
               "LD_PRELOAD": str(SHIM_DIR / "libunicache.so")}
        res = subprocess.run([str(SHIM_DIR / "uc_bench"), "budget", "--seconds", "0.02",
                              "--file", str(data), "--table-state", "unplaced"],
                             env=env, capture_output=True, text=True, check=False)
    finally:
        tables.close()
    doc = json.loads(res.stdout)
    assert doc["interposed"] is True and doc["table_state"] == "unplaced"
    assert [c["case"] for c in doc["cases"]] == ["unplaced-4k", "unplaced-64k", "pipe",
                                                  "socket"]
    for case in doc["cases"]:
        assert case["added_ns"] <= case["upper_ns"]
        assert case["met"] == (case["upper_ns"] <= case["limit_ns"])
    assert doc["met"] == all(c["met"] for c in doc["cases"])
    assert res.returncode == (0 if doc["met"] else 1)
    bad = subprocess.run([str(SHIM_DIR / "uc_bench"), "budget", "--file", str(data),
                          "--table-state", "half"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and bad.stdout == ""


@pytest.mark.parametrize(("args", "line"), [
    (["--rounds", "0"], "unicache bench shim: --rounds takes 1 to 100 and --seconds more "
                        "than 0 up to 60, not 0 and 0.15"),
    (["--sizes", "4096,3000"], "unicache bench shim: --sizes takes powers of two from 64 to "
                               "1048576 (whole chunks per block), not '4096,3000'"),
    (["--sizes", "4k"], "unicache bench shim: --sizes takes byte counts separated by commas, "
                        "not '4k'"),
    (["--kinds", "read,write"], "unicache bench shim: --kinds takes some of "
                                "read,pread,readv,fread separated by commas, not 'read,write'"),
    (["--file-sizes", "4096,131072"], "unicache bench shim: --file-sizes takes byte counts of "
                                      "1 to 65536 (files an open sample covers) separated by "
                                      "commas, or none, not '4096,131072'"),
    (["--file-sizes", "4k"], "unicache bench shim: --file-sizes takes byte counts of 1 to "
                             "65536 (files an open sample covers) separated by commas, or "
                             "none, not '4k'"),
    (["--tables", "placed,", "--quick"], None),
    (["--file-sizes", "none", "--quick"], None),
])
def test_bench_shim_bad_option_is_one_line(args: list[str], line: str | None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if line is None:  # a trailing comma is no error: stop the run before it starts
        monkeypatch.setattr(shim_bench_module, "build_shim", _no_build)
        line = "unicache bench shim: stopped before building"
    res = CliRunner().invoke(app, ["shim", *args])
    assert res.exit_code == 2
    assert res.output.strip() == line
    assert "Traceback" not in res.output


def _no_build(_kit: object = None) -> Path:
    raise BenchError("stopped before building")


def test_the_live_bench_without_the_simulator_is_one_line() -> None:
    # installed from the wheel alone: no unicache_sim (its guests' and daemon's driver)
    code = (
        "import sys\n"
        "import unicache.cli\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'unicache_sim':\n"
        "            raise ModuleNotFoundError(name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "sys.argv = ['unicache', 'bench', 'live', '--seconds', '1']\n"
        "unicache.cli.main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (
        "unicache bench live: the live bench drives its guests and daemon with the "
        "simulator's package, which is not installed (make sim-build; the host package "
        "has it)"
    )


def test_a_guest_bench_without_a_guest_image_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # outside a checkout, with no image built (make image) nor named (UNICACHE_IMAGE_DIR)
    monkeypatch.setenv("UNICACHE_IMAGE_DIR", str(tmp_path / "image"))
    res = CliRunner().invoke(app, ["programs", "--rounds", "1"])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert line.startswith("unicache bench programs: ")
    assert f"no guest image at {tmp_path / 'image'}: run `make image`" in line


def test_the_shim_bench_without_a_shim_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # installed from the wheel, with no checkout and no unicache-agent package
    monkeypatch.setattr(shim_bench_module, "CHECKOUT_AGENT", tmp_path / "checkout")
    monkeypatch.setattr(shim_bench_module, "INSTALLED_AGENT", tmp_path / "agent")
    res = CliRunner().invoke(app, ["shim", "--rounds", "1"])
    assert res.exit_code == 2
    assert res.output.strip().startswith(
        f"unicache bench shim: no shim to measure: not run from a source checkout, and no "
        f"unicache-agent package at {tmp_path / 'agent'}; pass --shim-dir DIR")
    # a --shim-dir that lacks the driver and the preloads says what it lacks
    (tmp_path / "kit" / "unicache_agent").mkdir(parents=True)
    (tmp_path / "kit" / "libunicache.so").write_bytes(b"")
    res = CliRunner().invoke(app, ["shim", "--rounds", "1", "--shim-dir", str(tmp_path / "kit")])
    assert res.exit_code == 2
    assert res.output.strip() == (f"unicache bench shim: {tmp_path / 'kit'} lacks uc_bench, "
                                  "libuc_null.so, libuc_floor.so")


def test_the_shim_bench_runs_an_installed_agents_shim(shim_bench: ModuleType,
                                                      tmp_path: Path) -> None:
    # the layout the unicache-agent package installs (/usr/lib/unicache-agent): binaries and
    # the agent's modules side by side, nothing to build
    kit = tmp_path / "unicache-agent"
    kit.mkdir()
    for name in shim_bench.TARGETS:
        (kit / name).write_bytes((SHIM_DIR / name).read_bytes())
        (kit / name).chmod(0o755)
    shutil.copytree(SHIM_DIR.parent / "unicache_agent", kit / "unicache_agent")
    res = CliRunner().invoke(app, ["shim", "--kinds", "read", "--sizes", "4096", "--patterns",
                                   "seq", "--tables", "unplaced", "--file-sizes", "4096",
                                   "--rounds", "1", "--seconds", "0.02", "--shim-dir",
                                   str(kit), "--json"])
    assert res.exit_code == 0, res.output
    fig = json.loads(res.stdout)
    assert [(c["kind"], c["size"], c["table"]) for c in fig["cells"]] == [
        ("read", 4096, "unplaced")]
    assert fig["counted_reads"]["unplaced"] > 0
    assert [(f["sample"], f["size"]) for f in fig["files"]] == [
        ("sampled", 4096), ("every", 4096), ("never", 4096)]
