"""The matrix of ``unicache bench shim``: its cells, the driver runs, their pooled figures.

A *cell* is one kind of call (read, pread, readv, stdio fread) of one size in one pattern
(``seq``, ``reread``) under one table state (shim_tables.py). The driver
(guest-agent/shim/uc_bench, ``uc_bench cell``) runs it in one process: blocks through the
interposed function against blocks through libc's own, every sample's ns per call printed.
Each cell runs once under the shim and once under ``libuc_null.so`` (the control: a preload
that does nothing, whose figure is the method's own zero) per round, the two processes in
alternating order; the samples of all rounds are pooled (shim_stats.py). The budgets' cells
run a third time per round, under ``libuc_floor.so`` (the floor: the least a preload that
counts reads does), so that each budget stands beside what no counting shim can go below on
this machine. The pipe and socket cells (write + read of 4 KiB) and the process starts
(``uc_bench spawn``: /bin/true and the interpreter) run the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unicache.bench import shim_stats, shim_tables
from unicache.errors import BenchError, ConfigError

KINDS = ("read", "pread", "readv", "fread")
PATTERNS = ("seq", "reread")
SIZES = (512, 4096, 16384, 65536, 262144)
FD_KINDS = ("pipe", "socket")
FD_SIZE = 4096
#: kinds whose function the shim interposes (fread reads through libc's internal read; the
#: files cell is open, fstat, read and close: shim_files.py)
INTERPOSED = frozenset({"read", "pread", "readv", "pipe", "socket", "files"})
#: kinds the floor (libuc_floor.so) interposes: read, and a pipe's or socket's write + read
FLOOR_KINDS = frozenset({"read", "pipe", "socket"})
#: the seq blocks are 1 MiB (uc_bench.h): sizes that divide it
MIN_SIZE, MAX_SIZE = 64, 1 << 20


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell of the matrix."""

    kind: str
    size: int
    pattern: str
    table: str

    def label(self) -> str:
        return f"{self.kind} {size_text(self.size)} {self.pattern} {self.table}"


def size_text(size: int) -> str:
    """``512 B``, ``4 KiB``."""
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


@dataclass(frozen=True, slots=True)
class Matrix:
    """The cells to run: every combination of these."""

    sizes: tuple[int, ...]
    kinds: tuple[str, ...]
    patterns: tuple[str, ...]
    tables: tuple[str, ...]

    def cells(self) -> list[Cell]:
        return [Cell(k, s, p, t) for t in self.tables for k in self.kinds
                for p in self.patterns for s in self.sizes]

    def check(self) -> Matrix:
        """This matrix, if every value is one the driver takes.

        :raises ConfigError: naming the option and its bad value.
        """
        bad_sizes = [s for s in self.sizes if not MIN_SIZE <= s <= MAX_SIZE or s & (s - 1)]
        if bad_sizes or not self.sizes:
            raise ConfigError(f"--sizes takes powers of two from {MIN_SIZE} to {MAX_SIZE} "
                              f"(whole chunks per block), not {_listed(self.sizes)}")
        for flag, names, allowed in (("--kinds", self.kinds, KINDS),
                                     ("--patterns", self.patterns, PATTERNS),
                                     ("--tables", self.tables, shim_tables.TABLE_STATES)):
            if not names or any(n not in allowed for n in names):
                raise ConfigError(f"{flag} takes some of {','.join(allowed)} separated by "
                                  f"commas, not {_listed(names)}")
        return self


def _listed(values: tuple[object, ...]) -> str:
    return repr(",".join(str(v) for v in values))


#: ``--quick``: the budgets' cells and little else
QUICK = Matrix((4096, 65536), ("read",), ("seq",), shim_tables.TABLE_STATES)


def _split(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p.replace("_", "")) for p in _split(text))
    except ValueError:
        raise ConfigError(f"--sizes takes byte counts separated by commas, not {text!r}") from None


def matrix_of(sizes: str | None = None, kinds: str | None = None,
              patterns: str | None = None, tables: str | None = None,
              quick: bool = False) -> Matrix:
    """The matrix from the command's options (None: the default, or ``--quick``'s).

    :raises ConfigError: naming the bad option.
    """
    base = QUICK if quick else Matrix(SIZES, KINDS, PATTERNS, shim_tables.TABLE_STATES)
    return Matrix(base.sizes if sizes is None else _sizes(sizes),
                  base.kinds if kinds is None else _split(kinds),
                  base.patterns if patterns is None else _split(patterns),
                  base.tables if tables is None else _split(tables)).check()


@dataclass(frozen=True, slots=True)
class Driver:
    """How to run uc_bench: its path, the three preloads (the shim, the control, the
    floor), the CPU, the base environment (the caller's, without LD_PRELOAD and
    UNICACHE_*)."""

    uc_bench: Path
    shim: Path
    null: Path
    floor: Path
    cpu: int
    base_env: dict[str, str]

    def _run(self, args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
        try:
            res = subprocess.run([str(self.uc_bench), *args], env=env, capture_output=True,
                                 text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise BenchError(f"uc_bench {args[0]} did not run") from err
        if res.returncode != 0:
            said = [line for line in res.stderr.splitlines() if line.strip()][-1:] or ["-"]
            raise BenchError(f"uc_bench {' '.join(args[:9])} failed (status "
                             f"{res.returncode}): {said[0][-300:]}")
        try:
            doc: dict[str, Any] = json.loads(res.stdout)
        except ValueError as err:
            raise BenchError(f"uc_bench {args[0]} printed no JSON: {res.stdout[:200]!r}") from err
        return doc

    def cell(self, kind: str, size: int, pattern: str, data: Path, seconds: float,
             preload: Path, table_env: dict[str, str]) -> dict[str, Any]:
        """One ``uc_bench cell`` under ``preload``; its JSON, every sample included.

        :param data: the file a read, pread, readv or fread cell reads; the directory of
            the files cell (shim_files.py); not read by a pipe or socket cell.
        """
        args = ["cell", "--kind", kind, "--size", str(size), "--seconds", f"{seconds:g}",
                "--cpu", str(self.cpu), "--blocks"]
        if kind == "files":
            args += ["--dir", str(data)]
        elif kind not in FD_KINDS:
            args += ["--pattern", pattern, "--file", str(data)]
        env = {**self.base_env, **table_env, "LD_PRELOAD": str(preload)}
        doc = self._run(args, env, timeout=4 * seconds + 120)
        # the shim's (or the floor's) own functions must have been the ones called, and the
        # null's not (the floor interposes read and write only: FLOOR_KINDS)
        expected = preload == self.shim or (preload == self.floor and kind in FLOOR_KINDS)
        if kind in INTERPOSED and doc.get("interposed") != expected:
            what = "is libc's" if expected else "is not libc's"
            raise BenchError(f"uc_bench under LD_PRELOAD={preload}: its {kind} {what}: the "
                             "preload did not load as it should")
        return doc

    def spawn(self, count: int, with_: Path, without: Path, command: tuple[str, ...],
              table_env: dict[str, str]) -> dict[str, Any]:
        """One ``uc_bench spawn``, itself under no preload; its JSON, every pair included."""
        args = ["spawn", "--count", str(count), "--with", str(with_), "--without",
                str(without), "--cpu", str(self.cpu), "--blocks", "--", *command]
        return self._run(args, {**self.base_env, **table_env}, timeout=count * 10.0 + 120)


@dataclass(slots=True)
class Pool:
    """Samples of several runs (processes) of one comparison: each run's own median, and
    the blocks pooled for the paths' medians."""

    with_blocks: list[float] = field(default_factory=list)
    without_blocks: list[float] = field(default_factory=list)
    run_medians: list[float] = field(default_factory=list)

    def add(self, doc: dict[str, Any], unit: str = "ns") -> None:
        self.with_blocks += doc["with_blocks"]
        self.without_blocks += doc["without_blocks"]
        self.run_medians.append(float(doc[f"added_{unit}"]))

    def paired(self) -> shim_stats.Paired:
        return shim_stats.paired_runs(self.run_medians, self.with_blocks, self.without_blocks)


def _floor(floor: shim_stats.Paired | None) -> dict[str, Any]:
    if floor is None:
        return {}
    return {"floor_ns": round(floor.added, 3), "floor_ci_low_ns": round(floor.ci_low, 3),
            "floor_ci_high_ns": round(floor.ci_high, 3)}


def stats_json(shim: shim_stats.Paired, control: shim_stats.Paired, unit: str
               ) -> dict[str, Any]:
    """A comparison's JSON members: the shim's figures, then its control's."""
    return {f"added_{unit}": round(shim.added, 3), f"ci_low_{unit}": round(shim.ci_low, 3),
            f"ci_high_{unit}": round(shim.ci_high, 3), "ratio": round(shim.ratio, 5),
            f"with_{unit}": round(shim.with_, 3), f"without_{unit}": round(shim.without, 3),
            f"control_{unit}": round(control.added, 3),
            f"control_ci_low_{unit}": round(control.ci_low, 3),
            f"control_ci_high_{unit}": round(control.ci_high, 3),
            "control_ratio": round(control.ratio, 5), "blocks": shim.blocks}


@dataclass(frozen=True, slots=True)
class CellResult:
    """One cell's figures: under the shim, under the null preload (the control), ns/call.

    :param round_added: the shim's median of each round (process) alone: the samples of
        the figure and its interval.
    :param floor: under the floor (libuc_floor.so), for a budget's cell; else None.
    """

    cell: Cell
    shim: shim_stats.Paired
    control: shim_stats.Paired
    round_added: tuple[float, ...]
    floor: shim_stats.Paired | None = None

    def as_json(self) -> dict[str, Any]:
        c = self.cell
        return {"kind": c.kind, "size": c.size, "pattern": c.pattern, "table": c.table,
                **stats_json(self.shim, self.control, "ns"), **_floor(self.floor),
                "round_added_ns": [round(x, 3) for x in self.round_added]}


@dataclass(frozen=True, slots=True)
class FdResult:
    """A pipe or socket cell: write + read of ``size`` bytes, ns per pair of calls (and
    under the floor: each is a budget's)."""

    kind: str
    size: int
    table: str
    shim: shim_stats.Paired
    control: shim_stats.Paired
    round_added: tuple[float, ...]
    floor: shim_stats.Paired | None = None

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "size": self.size, "table": self.table,
                **stats_json(self.shim, self.control, "ns"), **_floor(self.floor),
                "round_added_ns": [round(x, 3) for x in self.round_added]}


@dataclass(frozen=True, slots=True)
class SpawnResult:
    """Process starts: ``exec`` (/bin/true) or ``interpreter`` (python3 -c pass), us each."""

    kind: str
    command: tuple[str, ...]
    table: str
    shim: shim_stats.Paired
    control: shim_stats.Paired

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "command": list(self.command), "table": self.table,
                **stats_json(self.shim, self.control, "us"), "count": self.shim.blocks}


def interpreter() -> str:
    """The python3 a guest would start: the system's (a version manager's ``python3`` on
    PATH may be a shell script), else this one's real binary."""
    system = Path("/usr/bin/python3")
    return str(system) if system.is_file() else str(Path(sys.executable).resolve())
