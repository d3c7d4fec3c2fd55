"""``unicache bench shim``: what a guest's calls pay under libunicache.so, cell by cell.

For every cell of the matrix (shim_cells.py: kinds read, pread, readv, stdio fread; sizes
512 B to 256 KiB; patterns ``seq``, sequential through a page-cached 16 MiB file, and
``reread``, the same first bytes again; table states ``placed``, ``unplaced``, ``none``,
shim_tables.py), plus a pipe and a socketpair (4 KiB write + read), small files (open,
fstat, read to EOF, close per file, under three open samples: shim_files.py) and process
starts (/bin/true, ``python3 -c pass``), on this machine:

* ``added_ns``: the median over samples of (ns per call through the preloaded function
  - ns per call through libc's own), in one process pinned to one CPU (the driver
  guest-agent/shim/uc_bench; blocks of the two paths alternate, W O O W or O W W O, so load
  from other processes hits both alike), with its distribution-free 95 % interval
  (shim_stats.py);
* ``ratio``: libc's median ns per call over the preloaded one's;
* ``control_ns``: the same cell under ``libuc_null.so``, a preload that does nothing: the
  method's own zero, with its interval. It sits above 0 by what the PLT's stub costs (the
  preloaded path calls through it, libc's through a pointer; an application pays the stub
  with or without the shim): about 1.5 to 2 ns per call here (a reread's lseek + read:
  3 to 4 ns).
* ``floor_ns``: for the budgets' cells, the same under ``libuc_floor.so``, the least a
  preload that counts reads does (libc's function loaded before the call, the bytes added
  to the descriptor's counter after it). A budget whose limit lies below the floor's
  interval cannot be met on this machine by any shim that counts; the shim's figure less
  the floor's is what its own design adds.

Each cell runs once under each preload per round (the shim and the control; a budget's cell
under the floor too), each preload's process first in turn, and the rounds' samples are
pooled. Rounds are processes: the control shows offsets of a few
ns that differ from one process to the next (where the libraries and buffers landed) and
that a process's own interval does not see; more rounds average them out.

The budgets (upper end of the interval; sequential 4 KiB / 64 KiB reads, 8,192-entry
table) are held against the cells: unplaced 4 KiB and 64 KiB <= 15 ns, placed (counted,
never migrated) 4 KiB <= 40 ns, pipes and sockets <= 10 ns.

It needs the shim, its driver and the two reference preloads, and the agent's modules that
write tables (:func:`locate_shim`): from the source checkout, where it builds them with
``make``; from ``--shim-dir``; or from an installed unicache-agent package
(``/usr/lib/unicache-agent``).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unicache.bench import shim_cells, shim_files, shim_tables
from unicache.errors import BenchError, ConfigError

if TYPE_CHECKING:
    from unicache.bench import shim_stats

#: the source checkout's guest agent, when unicache runs from one (hypervisor/unicache/...)
CHECKOUT_AGENT = Path(__file__).resolve().parents[3] / "guest-agent"
#: where the unicache-agent package installs the shim, uc_bench and the agent's modules
INSTALLED_AGENT = Path("/usr/lib/unicache-agent")
#: what ``make`` builds: the shim, the driver, the control, the floor
TARGETS = ("libunicache.so", "uc_bench", "libuc_null.so", "libuc_floor.so")
#: seconds per start to size the spawn runs by (the interpreter's run takes about 2 x its
#: ``seconds``: it needs more starts than the others to see through its own spread)
EXEC_S, INTERPRETER_S = 1.5e-3, 10e-3


@dataclass(frozen=True, slots=True)
class Budget:
    """A cost the shim must stay within: the upper end of a cell's 95 % interval."""

    case: str
    kind: str
    size: int
    table: str  # "" for the pipe and socket (any table: they run under the placed one)
    limit_ns: float


BUDGETS = (Budget("unplaced-4k", "read", 4096, "unplaced", 15.0),
           Budget("unplaced-64k", "read", 65536, "unplaced", 15.0),
           Budget("placed-4k", "read", 4096, "placed", 40.0),
           Budget("pipe", "pipe", 4096, "", 10.0),
           Budget("socket", "socket", 4096, "", 10.0))


@dataclass(frozen=True, slots=True)
class BudgetResult:
    """A budget against this run (``upper_ns`` and ``met`` None: its cell was not run).

    :param floor: the floor's ``(low, median, high)`` in the same cell (None: not run).
    """

    case: str
    limit_ns: float
    upper_ns: float | None
    met: bool | None
    floor: tuple[float, float, float] | None = None

    def as_json(self) -> dict[str, Any]:
        floor = None if self.floor is None else {
            k: round(v, 3) for k, v in zip(("low_ns", "median_ns", "high_ns"), self.floor,
                                           strict=True)}
        return {"case": self.case, "limit_ns": self.limit_ns,
                "upper_ns": None if self.upper_ns is None else round(self.upper_ns, 3),
                "met": self.met, "floor": floor}


@dataclass(frozen=True, slots=True)
class ShimBenchResult:
    """Figures of one ``bench shim`` run.

    :param cells: the matrix, table by table.
    :param fds: the pipe and socket cells.
    :param files: the files cells (shim_files.py), size by size, sample by sample.
    :param spawn: the process starts.
    :param budgets: the budgets, met or not.
    :param cpu: the CPU every in-process cell was pinned to.
    :param seconds: seconds per cell and process.
    :param rounds: rounds (processes per cell and preload).
    :param table_entries: entries of the placed and unplaced tables.
    :param counted_reads: reads of the bench file the shim counted, per table state.
    :param files_counted_reads: reads of the files cells' files the shim counted, per open
        sample (every one under ``every``; practically none under ``never``).
    """

    cells: tuple[shim_cells.CellResult, ...]
    fds: tuple[shim_cells.FdResult, ...]
    files: tuple[shim_files.FilesResult, ...]
    spawn: tuple[shim_cells.SpawnResult, ...]
    budgets: tuple[BudgetResult, ...]
    cpu: int
    seconds: float
    rounds: int
    table_entries: int
    counted_reads: dict[str, int]
    files_counted_reads: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        """The JSON ``unicache bench shim --json`` prints."""
        return {"cells": [c.as_json() for c in self.cells],
                "fds": [f.as_json() for f in self.fds],
                "files": [f.as_json() for f in self.files],
                "spawn": [s.as_json() for s in self.spawn],
                "budgets": [b.as_json() for b in self.budgets],
                "cpu": self.cpu, "seconds": self.seconds, "rounds": self.rounds,
                "table_entries": self.table_entries, "counted_reads": self.counted_reads,
                "files_counted_reads": self.files_counted_reads,
                "files_per_dir": shim_files.FILES_PER_DIR,
                "file_size": shim_tables.FILE_SIZE, "chunk_size": shim_tables.CHUNK_SIZE,
                "min_read_size": shim_tables.MIN_READ_SIZE}


@dataclass(frozen=True, slots=True)
class ShimKit:
    """Where the bench finds what it runs.

    :param directory: holds :data:`TARGETS`.
    :param agent: holds the ``unicache_agent`` package.
    :param build: ``directory`` is the checkout's shim source: ``make`` builds it first.
    """

    directory: Path
    agent: Path
    build: bool

    def module(self, name: str) -> Any:
        """A guest agent module (stdlib only: shm, counters, table_writer)."""
        if str(self.agent) not in sys.path:
            sys.path.insert(0, str(self.agent))
        return importlib.import_module(f"unicache_agent.{name}")


def locate_shim(given: Path | None = None) -> ShimKit:
    """The shim to measure: ``given`` (``--shim-dir``), else the source checkout's, else the
    installed unicache-agent package's.

    :raises BenchError: when none holds the shim, the driver and the agent's modules.
    """
    if given is not None:
        agent = given if (given / "unicache_agent").is_dir() else given.parent
        return ShimKit(given, agent, (given / "Makefile").is_file())
    if (CHECKOUT_AGENT / "shim" / "Makefile").is_file():
        return ShimKit(CHECKOUT_AGENT / "shim", CHECKOUT_AGENT, True)
    if (INSTALLED_AGENT / "unicache_agent").is_dir():
        return ShimKit(INSTALLED_AGENT, INSTALLED_AGENT, False)
    raise BenchError(f"no shim to measure: not run from a source checkout, and no "
                     f"unicache-agent package at {INSTALLED_AGENT}; pass --shim-dir DIR "
                     f"(a directory with {', '.join(TARGETS)} and unicache_agent/)")


def build_shim(kit: ShimKit | None = None) -> ShimKit:
    """Build the shim, the driver and the preloads if ``kit`` is a checkout's; check that
    each is there.

    :returns: the kit (:func:`locate_shim`'s when None).
    :raises BenchError: when the build fails, or something is missing.
    """
    kit = kit or locate_shim()
    if kit.build:
        try:
            res = subprocess.run(["make", "-s", "-C", str(kit.directory), *TARGETS],
                                 check=False, capture_output=True, text=True)
        except OSError as err:
            raise BenchError(f"cannot run make in {kit.directory}") from err
        if res.returncode != 0:
            # make's last line names the target that failed; the compiler's are above it
            last = [ln for ln in res.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
            raise BenchError(f"cannot build {' '.join(TARGETS)} in {kit.directory}: "
                             f"{last[0][-200:]}")
    missing = [t for t in TARGETS if not (kit.directory / t).is_file()]
    if missing or not (kit.agent / "unicache_agent").is_dir():
        raise BenchError(f"{kit.directory} lacks {', '.join(missing) or 'unicache_agent/'}")
    return kit


def steps(matrix: shim_cells.Matrix, rounds: int, fds: bool = True, spawn: bool = True,
          file_sizes: Sequence[int] = shim_files.FILE_SIZES) -> int:
    """Progress steps of a run (one per cell, fd cell, files cell and start kind, per
    round)."""
    return rounds * (len(matrix.cells()) + (len(shim_cells.FD_KINDS) if fds else 0)
                     + len(shim_files.cells(tuple(file_sizes))) + (2 if spawn else 0))


def _is_budget_cell(kind: str, size: int, pattern: str, table: str) -> bool:
    return pattern == "seq" and any((b.kind, b.size, b.table) == (kind, size, table)
                                    for b in BUDGETS)


def _budgets(cells: Sequence[shim_cells.CellResult],
             fds: Sequence[shim_cells.FdResult]) -> tuple[BudgetResult, ...]:
    runs: dict[tuple[str, int, str], tuple[shim_stats.Paired, shim_stats.Paired | None]] = {
        (c.cell.kind, c.cell.size, c.cell.table): (c.shim, c.floor)
        for c in cells if c.cell.pattern == "seq"}
    runs.update({(f.kind, f.size, ""): (f.shim, f.floor) for f in fds})
    out = []
    for b in BUDGETS:
        run = runs.get((b.kind, b.size, b.table))
        if run is None:
            out.append(BudgetResult(b.case, b.limit_ns, None, None))
            continue
        shim, floor = run
        out.append(BudgetResult(b.case, b.limit_ns, shim.ci_high, shim.ci_high <= b.limit_ns,
                                None if floor is None
                                else (floor.ci_low, floor.added, floor.ci_high)))
    return tuple(out)


def _scratch_dir() -> str | None:
    # a disk file system's page cache, as a guest's files mostly are (tmpfs reads differ)
    return "/var/tmp" if os.path.isdir("/var/tmp") and os.access("/var/tmp", os.W_OK) else None


def run_shim_bench(sizes: Sequence[int] = shim_cells.SIZES,
                   kinds: Sequence[str] = shim_cells.KINDS,
                   patterns: Sequence[str] = shim_cells.PATTERNS,
                   tables: Sequence[str] = shim_tables.TABLE_STATES,
                   seconds: float = 0.15, rounds: int = 9, fds: bool = True,
                   spawn: bool = True,
                   file_sizes: Sequence[int] = shim_files.FILE_SIZES,
                   tick: Callable[[str], None] = lambda _: None,
                   shim_dir: Path | None = None) -> ShimBenchResult:
    """Measure what the calls of the matrix pay under the shim, against the control.

    :param sizes: bytes per call (powers of two, 64 B to 1 MiB).
    :param kinds: of read, pread, readv, fread.
    :param patterns: of seq, reread.
    :param tables: of placed, unplaced, none.
    :param seconds: seconds of blocks per cell, process and round.
    :param rounds: processes per cell and preload (alternating shim and control).
    :param fds: also the pipe and socket cells.
    :param spawn: also the process starts.
    :param file_sizes: the files cells' sizes, each under every open sample (none: none).
    :param tick: called before each step (its description; :func:`steps` counts them).
    :param shim_dir: the shim to measure (:func:`locate_shim`).
    :returns: the figures.
    :raises ConfigError: on a bad parameter.
    :raises BenchError: when the shim or its driver cannot run, or the shim did not count.
    """
    matrix = shim_cells.Matrix(tuple(sizes), tuple(kinds), tuple(patterns),
                               tuple(tables)).check()
    files_cells = shim_files.cells(shim_files.checked_sizes(tuple(file_sizes)))
    if not 1 <= rounds <= 100 or not 0 < seconds <= 60:
        raise ConfigError(f"--rounds takes 1 to 100 and --seconds more than 0 up to 60, not "
                          f"{rounds} and {seconds:g}")
    kit = build_shim(locate_shim(shim_dir))
    shm, counters, writer = (kit.module(n) for n in ("shm", "counters", "table_writer"))
    cpu = max(os.sched_getaffinity(0))
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("UNICACHE_") and k != "LD_PRELOAD"}
    d = kit.directory
    driver = shim_cells.Driver(d / "uc_bench", d / "libunicache.so", d / "libuc_null.so",
                               d / "libuc_floor.so", cpu, base)
    with tempfile.TemporaryDirectory(prefix="unicache-bench-", dir=_scratch_dir()) as tmp:
        data = Path(tmp) / "data"
        data.write_bytes(os.urandom(shim_tables.FILE_SIZE))
        dirs = {s: shim_files.make_files(Path(tmp), s)
                for s in dict.fromkeys(c.size for c in files_cells)}
        samples = shim_tables.OPEN_SAMPLES if files_cells else ()
        bench_tables = shim_tables.BenchTables(shm, counters, writer, Path(tmp), data,
                                                  matrix.tables, samples)
        try:
            run = _Run(driver, data, bench_tables, seconds, rounds, tick)
            cells = tuple(run.cell(c) for c in matrix.cells())
            fd_state = "placed" if "placed" in matrix.tables else matrix.tables[0]
            fd_results = (tuple(run.fd(k, fd_state) for k in shim_cells.FD_KINDS)
                          if fds else ())
            files = tuple(run.files(c, dirs[c.size]) for c in files_cells)
            starts = (run.spawn("exec", ("/bin/true",), fd_state),
                      run.spawn("interpreter", (shim_cells.interpreter(), "-c", "pass"),
                                fd_state)) if spawn else ()
            counted = _check_counted(bench_tables, matrix)
            files_counted = _check_files_counted(bench_tables, samples)
            entries = max((s.entries for s in bench_tables.states.values()), default=0)
        finally:
            bench_tables.close()
    return ShimBenchResult(cells, fd_results, files, starts, _budgets(cells, fd_results),
                           cpu, seconds, rounds, entries, counted, files_counted)


def _check_files_counted(bench_tables: shim_tables.BenchTables,
                         samples: Sequence[str]) -> dict[str, int]:
    """Reads of the files cells' files the shim counted per open sample; with every open
    counted there must be some, or the shim did not run (or did not see its table)."""
    counted = {s: bench_tables.states[shim_tables.sampled_state(s)].reads_counted()
               for s in samples}
    if counted.get("every") == 0:
        raise BenchError("the shim counted no reads of the files cells' files with every "
                         "open counted: it did not run under LD_PRELOAD, or did not map the "
                         "table")
    return counted


def _check_counted(bench_tables: shim_tables.BenchTables,
                   matrix: shim_cells.Matrix) -> dict[str, int]:
    """Reads of the bench file the shim counted per table; a table whose seq reads ran
    must have some, or the shim did not run (or did not see its table)."""
    counted = {}
    for name in matrix.tables:
        state = bench_tables.states[name]
        if state.harvester is None:
            continue
        counted[name] = state.reads_of_file()
        if counted[name] == 0 and "read" in matrix.kinds and "seq" in matrix.patterns:
            raise BenchError(f"the shim counted no reads of the bench file under the {name} "
                             "table: it did not run under LD_PRELOAD, or did not map the table")
    return counted


@dataclass(frozen=True, slots=True)
class _Run:
    """The runs of one bench: every comparison, round by round, shim and control."""

    driver: shim_cells.Driver
    data: Path
    tables: shim_tables.BenchTables
    seconds: float
    rounds: int
    tick: Callable[[str], None]

    def _pools(self, label: str, once: Callable[[Path], dict[str, Any]], floor: bool = False
               ) -> tuple[shim_cells.Pool, shim_cells.Pool, shim_cells.Pool | None]:
        d = self.driver
        pools = {d.shim: shim_cells.Pool(), d.null: shim_cells.Pool()}
        if floor:
            pools[d.floor] = shim_cells.Pool()
        order = list(pools)
        for r in range(self.rounds):
            self.tick(f"{label} (round {r + 1}/{self.rounds})")
            # each preload's process first in turn: the shim's in round 0, the control's in 1
            for preload in order[r % len(order):] + order[:r % len(order)]:
                pools[preload].add(once(preload))
        return pools[d.shim], pools[d.null], pools.get(d.floor)

    def cell(self, cell: shim_cells.Cell) -> shim_cells.CellResult:
        env = self.tables.states[cell.table].env
        shim, control, floor = self._pools(cell.label(), lambda preload: self.driver.cell(
            cell.kind, cell.size, cell.pattern, self.data, self.seconds, preload, env),
            floor=_is_budget_cell(cell.kind, cell.size, cell.pattern, cell.table))
        return shim_cells.CellResult(cell, shim.paired(), control.paired(),
                                     tuple(shim.run_medians),
                                     None if floor is None else floor.paired())

    def fd(self, kind: str, table: str) -> shim_cells.FdResult:
        env, size = self.tables.states[table].env, shim_cells.FD_SIZE
        shim, control, floor = self._pools(
            f"{kind} {size} B write + read", lambda preload: self.driver.cell(
                kind, size, "-", self.data, self.seconds, preload, env), floor=True)
        return shim_cells.FdResult(kind, size, table, shim.paired(), control.paired(),
                                   tuple(shim.run_medians),
                                   None if floor is None else floor.paired())

    def files(self, cell: shim_files.FilesCell, directory: Path) -> shim_files.FilesResult:
        state = self.tables.states[cell.table]
        shim, control, _ = self._pools(cell.label(), lambda preload: self.driver.cell(
            "files", cell.size, "-", directory, self.seconds, preload, state.env))
        return shim_files.FilesResult(cell, state.sample.max_bytes, state.sample.shift,
                                      shim.paired(), control.paired(),
                                      tuple(shim.run_medians))

    def spawn(self, kind: str, command: tuple[str, ...], table: str) -> shim_cells.SpawnResult:
        env, d = self.tables.states[table].env, self.driver
        count = max(4, round(self.seconds / (EXEC_S if kind == "exec" else INTERPRETER_S)))
        shim, control = shim_cells.Pool(), shim_cells.Pool()
        for r in range(self.rounds):
            self.tick(f"{kind} start (round {r + 1}/{self.rounds})")
            # the shim against the null preload, and the null against itself: the control
            for with_ in ((d.shim, d.null) if r % 2 == 0 else (d.null, d.shim)):
                (shim if with_ == d.shim else control).add(
                    d.spawn(count, with_, d.null, command, env), unit="us")
        return shim_cells.SpawnResult(kind, command, table, shim.paired(), control.paired())
